#!/usr/bin/env bash
# Installs what shadowsync needs on a fresh machine, and nothing twice.
#
#  * a C/C++ toolchain (Debian packages) if missing;
#  * a CPU-only libtorch 2.13.0 assembled from pinned, sha256-verified PyPI wheels
#    (the machine reaches PyPI, not the libtorch download host), cached in
#    $SHADOWSYNC_CACHE (default ~/.cache/shadowsync) outside the clone;
#  * the link `.libtorch` in the clone, which `.cargo/config.toml` points LIBTORCH at,
#    so plain `cargo build/test/run` find libtorch (build.rs adds an rpath).
#
# With --with-torch it also makes a Python venv with PyTorch 2.13.0 (CUDA wheels
# from PyPI, several GB, cached) for the reference benchmarks; with --with-mpi it
# installs Open MPI and libclang (Debian packages) for the `mpi` cargo feature.
#
# Idempotent: a second run checks stamp files and returns in about a second.
set -euo pipefail

with_torch=false
with_mpi=false
for arg in "$@"; do
  case "$arg" in
    --with-torch) with_torch=true ;;
    --with-mpi) with_mpi=true ;;
    *) echo "setup: unknown option $arg (known: --with-torch, --with-mpi)" >&2; exit 2 ;;
  esac
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${SHADOWSYNC_CACHE:-$HOME/.cache/shadowsync}
libtorch=$cache/libtorch-2.13.0-cpu
wheels=$cache/wheels

# name | sha256 — the three wheels a CPU libtorch is made from (docs/design.md §2).
pins=(
  "torch==2.13.0|torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl|60fcdcb2f3876e21146cb4524ef06397d727ca9ad5f020818547e25075fe3cb7"
  "nvidia-cuda-runtime==13.0.96|nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl|7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548"
  "nvidia-cuda-cupti==13.0.85|nvidia_cuda_cupti-13.0.85-py3-none-manylinux_2_25_x86_64.whl|4eb01c08e859bf924d222250d2e8f8b8ff6d3db4721288cf35d14252a4d933c8"
)

say() { printf 'setup: %s\n' "$*" >&2; }

install_system_packages() {
  local missing=()
  command -v g++ >/dev/null || missing+=(g++)
  command -v make >/dev/null || missing+=(make)
  command -v python3 >/dev/null || missing+=(python3)
  python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
  command -v cargo >/dev/null || { say "cargo not found: install Rust (rustup) first"; exit 1; }
  if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  fi
}

fetch_wheel() { # spec file sha
  local spec=$1 file=$2 sha=$3
  if [[ -f $wheels/$file ]] && echo "$sha  $wheels/$file" | sha256sum --check --status; then
    return
  fi
  say "downloading $spec from PyPI"
  rm -f "$wheels/$file"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_25_x86_64 \
    --platform manylinux_2_17_x86_64 -d "$wheels" "$spec"
  if ! echo "$sha  $wheels/$file" | sha256sum --check --status; then
    say "sha256 mismatch for $wheels/$file (expected $sha); refusing to use it"
    rm -f "$wheels/$file"
    exit 1
  fi
}

assemble_libtorch() {
  mkdir -p "$wheels"
  local pin spec file sha
  for pin in "${pins[@]}"; do
    IFS='|' read -r spec file sha <<<"$pin"
    fetch_wheel "$spec" "$file" "$sha"
  done
  say "assembling CPU libtorch in $libtorch"
  local tmp
  tmp=$(mktemp -d "$cache/libtorch.XXXXXX")
  chmod 755 "$tmp"
  python3 - "$wheels" "$tmp" <<'PY'
import sys, zipfile, os, shutil
wheels, out = sys.argv[1], sys.argv[2]
lib = os.path.join(out, "lib"); os.makedirs(lib)
torch = zipfile.ZipFile(os.path.join(wheels, "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"))
for name in torch.namelist():
    if name.startswith("torch/include/") and not name.endswith("/"):
        dest = os.path.join(out, name[len("torch/"):])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with torch.open(name) as src, open(dest, "wb") as dst:
            shutil.copyfileobj(src, dst)
def take(zf, member, as_name):
    with zf.open(member) as src, open(os.path.join(lib, as_name), "wb") as dst:
        shutil.copyfileobj(src, dst)
for so in ("libtorch_cpu.so", "libc10.so", "libgomp.so.1"):
    take(torch, "torch/lib/" + so, so)
for wheel in os.listdir(wheels):
    if wheel.startswith("nvidia_cuda_runtime-"):
        take(zipfile.ZipFile(os.path.join(wheels, wheel)), "nvidia/cu13/lib/libcudart.so.13", "libcudart.so.13")
    if wheel.startswith("nvidia_cuda_cupti-"):
        take(zipfile.ZipFile(os.path.join(wheels, wheel)), "nvidia/cu13/lib/libcupti.so.13", "libcupti.so.13")
# libtorch.so in the wheel drags in the CUDA kernels; a linker script keeps CPU only.
with open(os.path.join(lib, "libtorch.so"), "w") as f:
    f.write("INPUT(libtorch_cpu.so)\n")
with open(os.path.join(out, "build-version"), "w") as f:
    f.write("2.13.0\n")
PY
  rm -rf "$libtorch"
  mv "$tmp" "$libtorch"
  touch "$libtorch/.complete"
}

install_mpi() {
  # Open MPI 4.1 (mpirun, headers) and libclang, which the mpi crate's bindgen needs.
  local packages=(libopenmpi-dev openmpi-bin libclang-dev) missing=() package
  for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
  done
  if ((${#missing[@]})); then
    say "installing ${missing[*]} (for the mpi feature)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
  fi
}

install_torch_venv() {
  local venv=$cache/torch-venv
  # The stamp holds the package list: a venv made with fewer gets the rest added.
  local packages=(torch==2.13.0 numpy scipy)
  [[ -f $venv/.complete && $(<"$venv/.complete") == "${packages[*]}" ]] && return
  say "installing ${packages[*]} into $venv (for reference benchmarks)"
  if [[ ! -f $venv/.complete ]]; then
    command -v python3 >/dev/null && python3 -c "import venv, ensurepip" 2>/dev/null || {
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
    }
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install -q "${packages[@]}"
  echo "${packages[*]}" > "$venv/.complete"
}

install_system_packages
[[ -f $libtorch/.complete ]] || assemble_libtorch
ln -sfn "$libtorch" "$repo/.libtorch"
if $with_torch; then install_torch_venv; fi
if $with_mpi; then install_mpi; fi
