/* CPU emulator: the runtime API, and in C++ (the .cu files) the device-side emulation. */
#ifndef VLA_EMU_CUDA_RUNTIME_H
#define VLA_EMU_CUDA_RUNTIME_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "emu_device.h"
#endif
#endif
