# shellcheck shell=bash
# Sourced on the GPU machine (bash), from any folder: sets up what benchmarks/fetch_device_deps.sh
# fetched here and the device call carried (the GPU machine reaches no registry):
#   - unpacks .debs/*.deb into a prefix (VLA_PREFIX, default /tmp/vla-deb-prefix; once: a second
#     source finds it unpacked), makes its pkg-config files point into it, and points CMake
#     (CMAKE_PREFIX_PATH), pkg-config (PKG_CONFIG_PATH, the prefix's pkgconf on PATH) and the
#     loader (LD_LIBRARY_PATH) at it: Check, subunit, OpenBLAS, CLBlast, the OpenCL ICD loader;
#   - registers NVIDIA's OpenCL driver with the ICD loader (/etc/OpenCL/vendors/nvidia.icd naming
#     libnvidia-opencl.so.1) where nvidia-smi is found, the folder is writable (root) and it is
#     not registered yet;
#   - installs .whl/*.whl into /tmp/site (VLA_SITE) and puts it on PYTHONPATH;
#   - puts /usr/local/cuda/bin on PATH.
# Missing folders are skipped with a line on stderr. Sets VLA_DEVICE_ENV=1.
#
#   source benchmarks/device_env.sh      (carry [".debs", ".whl"] in the device call)
#
# LD_LIBRARY_PATH then leads to Debian's libgfortran and libOpenCL before the machine's own:
# run Python (PyTorch) with `env -u LD_LIBRARY_PATH python3 ...`, as benchmarks/gpu_report.sh does.

_vla_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_vla_ma=x86_64-linux-gnu
VLA_PREFIX=${VLA_PREFIX:-/tmp/vla-deb-prefix}
VLA_SITE=${VLA_SITE:-/tmp/site}
export VLA_PREFIX VLA_SITE
_vla_note=""

# Wheels first, before LD_LIBRARY_PATH leads Python to Debian's libraries.
if compgen -G "$_vla_root/.whl/*.whl" > /dev/null; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$VLA_SITE" \
    "$_vla_root"/.whl/*.whl > /tmp/vla-pip-install.log 2>&1; then
    case ":${PYTHONPATH:-}:" in *":$VLA_SITE:"*) ;; *) export PYTHONPATH=$VLA_SITE${PYTHONPATH:+:$PYTHONPATH} ;; esac
    _vla_note="$_vla_note; wheels into $VLA_SITE: $(cd "$_vla_root/.whl" && echo *.whl)"
  else
    echo "device_env.sh: pip install of .whl/ failed (/tmp/vla-pip-install.log)" >&2
  fi
else
  echo "device_env.sh: no .whl/ (run benchmarks/fetch_device_deps.sh here and carry .whl): no peers' wheels" >&2
fi

if compgen -G "$_vla_root/.debs/*.deb" > /dev/null; then
  if [ ! -e "$VLA_PREFIX/.unpacked" ] || [ "$(cat "$VLA_PREFIX/.unpacked")" != "$(cd "$_vla_root/.debs" && echo *.deb)" ]; then
    mkdir -p "$VLA_PREFIX"
    for _vla_d in "$_vla_root"/.debs/*.deb; do dpkg -x "$_vla_d" "$VLA_PREFIX"; done
    # Debian's .pc files name /usr (prefix=/usr; OpenBLAS's libdir and includedir in full).
    find "$VLA_PREFIX" -name '*.pc' -exec sed -i -e "s|^prefix=/usr\$|prefix=$VLA_PREFIX/usr|" \
      -e "s|=/usr/|=$VLA_PREFIX/usr/|" {} +
    (cd "$_vla_root/.debs" && echo *.deb) > "$VLA_PREFIX/.unpacked"
  fi
  _vla_lib=$VLA_PREFIX/usr/lib/$_vla_ma
  export LD_LIBRARY_PATH=$_vla_lib:$_vla_lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_PATH=$_vla_lib/pkgconfig:$_vla_lib/openblas-pthread/pkgconfig:$VLA_PREFIX/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export CMAKE_PREFIX_PATH=$VLA_PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  # After the machine's own programs: the prefix adds pkg-config (pkgconf) where it is missing.
  case ":$PATH:" in *":$VLA_PREFIX/usr/bin:"*) ;; *) export PATH=$PATH:$VLA_PREFIX/usr/bin ;; esac
  _vla_note="$_vla_note; $(wc -w < "$VLA_PREFIX/.unpacked") .debs in $VLA_PREFIX"
else
  echo "device_env.sh: no .debs/ (run benchmarks/fetch_device_deps.sh here and carry .debs): no Check, OpenBLAS, CLBlast" >&2
fi

if [ -d /usr/local/cuda/bin ]; then
  case ":$PATH:" in *":/usr/local/cuda/bin:"*) ;; *) export PATH=$PATH:/usr/local/cuda/bin ;; esac
fi

if ! command -v nvidia-smi > /dev/null || [ -e /etc/OpenCL/vendors/nvidia.icd ] ||
  grep -qs libnvidia-opencl /etc/OpenCL/vendors/*.icd; then
  : # no NVIDIA driver here, or registered already
elif mkdir -p /etc/OpenCL/vendors 2> /dev/null && echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd 2> /dev/null; then
  _vla_note="$_vla_note; NVIDIA's OpenCL registered"
else
  echo "device_env.sh: could not write /etc/OpenCL/vendors/nvidia.icd (not root?): no NVIDIA OpenCL" >&2
fi
_vla_note="$_vla_note; OpenCL vendors: $(cd /etc/OpenCL/vendors 2> /dev/null && echo *.icd)"

export VLA_DEVICE_ENV=1
echo "device_env.sh: ${_vla_note#; }" >&2
unset _vla_root _vla_ma _vla_note _vla_d _vla_lib
