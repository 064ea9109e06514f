# Sourced by scripts/bootstrap.sh and benchmarks/bootstrap.sh.
# find_python: print the path of a Python >= 3.12 (3.12 preferred, as .python-version says).
find_python() {
  local candidates=(python3.12)
  for v in "${HOME}"/.pyenv/versions/3.1[2-9]*/bin/python3; do
    [ -x "$v" ] && candidates+=("$v")
  done
  candidates+=(python3.13 python3)
  for c in "${candidates[@]}"; do
    if command -v "$c" >/dev/null 2>&1 &&
       "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
      command -v "$c"
      return 0
    fi
  done
  return 1
}
