# Sourced by the H200 device scripts (benchmarks/h200_*.sh), from the repository root: unpacks the
# Debian packages carried in .debs/ (check, subunit, pkgconf, OpenBLAS, CLBlast; the device
# machine reaches no registry) into /tmp/vla-deb-prefix, points CMake, pkg-config and the loader
# at them, and registers NVIDIA's OpenCL driver with the ICD loader.
PREFIX=/tmp/vla-deb-prefix MA=x86_64-linux-gnu
mkdir -p "$PREFIX"
for d in .debs/*.deb; do dpkg -x "$d" "$PREFIX"; done
find "$PREFIX" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$PREFIX/usr|" {} + 2>/dev/null
export LD_LIBRARY_PATH=$PREFIX/usr/lib/$MA:$PREFIX/usr/lib/$MA/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PKG_CONFIG_PATH=$PREFIX/usr/lib/$MA/pkgconfig:$PREFIX/usr/lib/$MA/openblas-pthread/pkgconfig
export CMAKE_PREFIX_PATH=$PREFIX/usr PATH=$PATH:/usr/local/cuda/bin:$PREFIX/usr/bin
mkdir -p /etc/OpenCL/vendors && echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
