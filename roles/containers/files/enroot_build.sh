#!/bin/sh
# Build enroot from its release archive on the builder node and pack the install tree:
#   enroot_build.sh WORKDIR PREFIX OUTPUT MAKE_ARG...
# (the containers role's build_enroot.yml; WORKDIR holds source.tar.gz, the log goes to
# WORKDIR/build.log). The archive lacks enroot's git submodules: musl is not used (FORCE_GLIBC=1
# among the make arguments), Debian's makeself stands in for deps/makeself, the OS's kernel headers
# (linux-libc-dev) for deps/linux-headers. glibc before 2.38 has no strlcpy/strlcat: they come
# from libbsd then. enroot writes its own paths into its script and config with the staging
# directory in front (as its `make dist` does, that prefix is removed again).
set -eu
work=$1 prefix=$2 output=$3
shift 3
log="$work/build.log"
src="$work/src" stage="$work/stage"
mkdir -p "$src" "$stage"
tar -xzf "$work/source.tar.gz" -C "$src" --strip-components=1
cd "$src"
install -m 755 -D "$(command -v makeself)" deps/dist/makeself/bin/enroot-makeself
touch deps/makeself/.stamp
mkdir -p deps/dist/linux/include
touch deps/linux-headers/.stamp
cppflags="" libs="-l:libbsd.a"
printf '#include <string.h>\nint main(void){char b[2];return (int)strlcpy(b,"a",2);}\n' >"$work/strl.c"
if ! cc -Werror=implicit-function-declaration -o "$work/strl" "$work/strl.c" >/dev/null 2>&1; then
  printf '#include <stddef.h>\nsize_t strlcpy(char *, const char *, size_t);\nsize_t strlcat(char *, const char *, size_t);\n' >"$work/strl.h"
  cppflags="-include $work/strl.h" libs="-l:libbsd.a -l:libbsd.so"
  echo "glibc without strlcpy: libbsd's" >"$log"
fi
CPPFLAGS=$cppflags make -j"$(nproc)" "$@" LDLIBS="$libs" DESTDIR="$stage" install >>"$log" 2>&1
sed -i "s;$stage;;g" "$stage$prefix/bin/enroot" "$stage$prefix/etc/enroot/enroot.conf"
tar -C "$stage$(dirname "$prefix")" -czf "$output.part" "$(basename "$prefix")"
mv "$output.part" "$output"
