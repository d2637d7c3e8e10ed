# fleetgate sandbox init. unshare(1) starts this as PID 1 of fresh user, mount, network and PID
# namespaces; it is never run on the host itself. It builds a root of its own on a tmpfs, runs one
# command there with no capabilities, kills every process of the namespace when the command ends or
# its time is up, and writes what the command left in /run/fleetgate/out to its stdout (a tar).
#
# $1 is the spec directory the caller prepared (spec.nul, env.nul, command.nul, payload files).
# spec.nul holds NUL-terminated records: OP, then its operands:
#   size BYTES            size of the sandbox's tmpfs
#   ro HOSTDIR PATH       HOSTDIR read-only at PATH (the fleet repository)
#   dir PATH              an empty directory
#   empty PATH            an empty placeholder file (a declared payload)
#   put FILE PATH         a copy of FILE at PATH, executable; bound over the file already at PATH
#   tree DIR              DIR is copied onto the root (links to /usr, /dev/fd, /etc basics, /run/fleetgate);
#                         several trees are copied in their order
#   stdin FILE            FILE is the command's standard input (copied to /run/fleetgate/stdin)
#   rodir PATH            this machine's PATH, read-only (a /lib that is no link to /usr)
#   cwd PATH | timeout SECONDS | limit BYTES
set -u
__spec=$1
PATH=/usr/sbin:/usr/bin:/sbin:/bin
__fail() {
    printf 'fleetgate-sandbox: %s\n' "$*" >&2
    exit 70
}

__size=$((64 << 20)) __cwd=/ __timeout=10 __stdin=/dev/null __stdin_from= __limit=$((4 << 20))
__ro=() __dirs=() __empty=() __put=() __rodirs=() __trees=()
while IFS= read -r -d '' __op; do
    case $__op in
        size) IFS= read -r -d '' __size ;;
        cwd) IFS= read -r -d '' __cwd ;;
        timeout) IFS= read -r -d '' __timeout ;;
        stdin) IFS= read -r -d '' __stdin_from; __stdin=/run/fleetgate/stdin ;;
        limit) IFS= read -r -d '' __limit ;;
        ro) IFS= read -r -d '' __a; IFS= read -r -d '' __b; __ro+=("$__a" "$__b") ;;
        dir) IFS= read -r -d '' __a; __dirs+=("$__a") ;;
        empty) IFS= read -r -d '' __a; __empty+=("$__a") ;;
        put) IFS= read -r -d '' __a; IFS= read -r -d '' __b; __put+=("$__a" "$__b") ;;
        tree) IFS= read -r -d '' __a; __trees+=("$__a") ;;
        rodir) IFS= read -r -d '' __a; __rodirs+=("$__a") ;;
        *) __fail "unknown spec record $__op" ;;
    esac
done <"$__spec/spec.nul"
mapfile -d '' __env <"$__spec/env.nul"
mapfile -d '' __cmd <"$__spec/command.nul"

# The overlay's upper layer sits in the same tmpfs (/.usr-upper), so one size bounds every write.
__root=$__spec/mnt
__upper=$__root/.usr-upper
mount -t tmpfs -o "size=$__size,mode=0755,nosuid,nodev" fleetgate "$__root" || __fail "cannot mount a tmpfs"
mkdir -p -- "$__upper/u" "$__upper/w" "$__root/usr" "$__root/etc" "$__root/dev" "$__root/proc" "$__root/.old" \
    "$__root/run/fleetgate/out" "${__dirs[@]/#/$__root}" "${__rodirs[@]/#/$__root}" || __fail "cannot lay out the sandbox root"

# This machine's programs, writable only into the tmpfs (an overlay), else read-only.
mount -t overlay overlay -o "lowerdir=/usr,upperdir=$__upper/u,workdir=$__upper/w" "$__root/usr" 2>/dev/null ||
    mount -o bind,ro /usr "$__root/usr" || __fail "cannot mount /usr"
for __d in "${__rodirs[@]}"; do
    mount -o bind,ro -- "$__d" "$__root$__d" || __fail "cannot mount $__d"
done
# Of this machine's devices, /dev/null only.
: >"$__root/dev/null" && mount --bind /dev/null "$__root/dev/null" || __fail "cannot bind /dev/null"
# A proc of this PID namespace only; where the machine forbids it (a masked /proc), none at all.
mount -t proc -o nosuid,nodev,noexec proc "$__root/proc" 2>/dev/null || true

# Declared placeholders first, then the repository over them, then the stubs over both.
for __p in "${__empty[@]}"; do
    [[ -e $__root$__p ]] || : 2>/dev/null >"$__root$__p"
done
for ((__i = 0; __i < ${#__ro[@]}; __i += 2)); do
    mount -o bind,ro -- "${__ro[__i]}" "$__root${__ro[__i + 1]}" || __fail "cannot mount ${__ro[__i + 1]}"
done
# The caller's tree: the links to /usr (/bin, /lib, ...), /dev/fd, what programs need of /etc to start
# (the update-alternatives links, the loader's cache: no passwd, no keys, no hosts) and /run/fleetgate.
if ((${#__trees[@]})); then
    cp -a -- "${__trees[@]/%//.}" "$__root/" || __fail "cannot copy the sandbox tree"
fi
if [[ -n $__stdin_from ]]; then
    cp -- "$__stdin_from" "$__root/run/fleetgate/stdin" || __fail "cannot copy the input"
fi
# Stubs elsewhere (every directory the engine could be started from): written with builtins and
# made executable in one go; where a file is already there, bound over it.
__made=()
for ((__i = 0; __i < ${#__put[@]}; __i += 2)); do
    __src=${__put[__i]} __target=$__root${__put[__i + 1]}
    if [[ -e $__target ]]; then
        [[ -f $__target ]] && mount --bind -- "$__src" "$__target" 2>/dev/null
        continue
    fi
    IFS= read -r -d '' __content <"$__src"
    if printf '%s' "$__content" 2>/dev/null >"$__target"; then
        __made+=("$__target")
    fi
done
((${#__made[@]})) && chmod 0755 -- "${__made[@]}"

# The new root becomes the only root: this machine's file system is not reachable from it.
cd "$__root" && pivot_root . .old || __fail "pivot_root failed"
cd / && umount -l /.old || __fail "cannot detach this machine's root"

__out=/run/fleetgate/out
# The command: no capabilities (so no mount, no chroot, no remount of the read-only repository),
# no privilege gain, an environment of exactly what the caller passed.
(
    cd -- "$__cwd" 2>/dev/null || cd /
    exec setpriv --no-new-privs --inh-caps=-all --ambient-caps=-all --bounding-set=-all -- \
        env -i -- "${__env[@]}" "${__cmd[@]}" <"$__stdin" >"$__out/stdout" 2>"$__out/stderr"
) &
__pid=$!
(
    exec 2>/dev/null
    sleep "$__timeout"
    printf '' >/run/fleetgate/timed-out
    kill -KILL -1
) &
wait "$__pid"
__rc=$?
# Every process of the namespace but this one: background children, daemons, the watchdog.
kill -KILL -1 2>/dev/null
wait 2>/dev/null
printf '%s' "$__rc" >"$__out/.rc"
[[ -e /run/fleetgate/timed-out ]] && printf '' >"$__out/.timed-out"
exec tar -c -f - -C "$__out" .
