# fleetgate sandbox init. unshare(1) starts this (bash -c, so that no host path is in its argv) as
# PID 1 of fresh user, mount, UTS, network and PID namespaces, in the spec directory the caller
# prepared; it is never run on the host itself. It builds a root of its own on a tmpfs, runs one
# command there with no capabilities and bounded processes and memory, kills every process of the
# namespace when the command ends, floods the process table or runs out of time, writes what the
# command left in /run/fleetgate/out to its stdout (a tar) and one status line to its stderr.
#
# Before pivot_root it touches only fixed paths of the new root (and this machine's trusted program
# directories, /dev nodes and the caller's own cached trees, all read-only). Every path that comes
# from the fleet (directories, placeholders, the repository's mount points, stubs) is created after
# pivot_root, when the host's file system is no longer reachable: `..` and symlinks then resolve
# inside the new root, whatever they say.
#
# The standard input names the spec directory, which holds spec.nul, env.nul, command.nul. spec.nul holds NUL-terminated records:
# OP, then its operands:
#   size BYTES            size of the sandbox's tmpfs (the scratch)
#   ro HOSTDIR PATH       HOSTDIR read-only at PATH (the fleet repository; /proc/self/fd/N, a directory
#                         the caller opened)
#   dir PATH              an empty directory
#   empty PATH            an empty placeholder file (a declared payload)
#   put NAME PATH         the tree's /.fg/blob/NAME at PATH, executable; bound read-only over a file already there
#   tree DIR              DIR is copied onto the root (links to /usr, /dev/fd, /etc basics, /run/fleetgate,
#                         /.fg/blob); several trees are copied in their order
#   stdin FILE            FILE is the command's standard input (copied to /run/fleetgate/stdin)
#   rodir PATH            this machine's PATH, read-only (a /lib that is no link to /usr)
#   cwd PATH | timeout SECONDS | ticks N | limit BYTES | nproc N | mem KIB | hostname NAME
set -u
PATH=/usr/sbin:/usr/bin:/sbin:/bin
# When fleetgate runs as root, uid 0 here is an unprivileged host user and the host's root is uid 1
# here: unshare(1) starts this as uid 1 with the namespace's capabilities kept; it becomes uid 0 here
# at once, with no_new_privs (a setuid-root program such as mount(8) must not turn it back into uid 1)
# -- its capabilities reach files owned by either uid: the repository under a directory only
# root may enter binds and reads as before), and says so to itself with --mapped.
if ((EUID != 0)); then
    exec setpriv --reuid=0 --regid=0 --clear-groups --no-new-privs -- /bin/bash --noprofile --norc -c "$BASH_EXECUTION_STRING" \
        fleetgate-init --mapped
fi
__fail() {
    printf 'fleetgate-sandbox: %s\n' "$*" >&2
    exit 70
}
# One fstab line binding $1 read-only at $2, added to __tab (no subshell: a fork costs milliseconds).
# libmount reads \040 \011 \012 \134 as space, tab, newline, backslash.
__bind_ro() {
    local f a=()
    for f in "$1" "$2"; do
        f=${f//\\/\\134}
        f=${f// /\\040}
        f=${f//$'\t'/\\011}
        a+=("${f//$'\n'/\\012}")
    done
    __tab+="${a[0]} ${a[1]} none bind,ro 0 0"$'\n'
}

IFS= read -r __spec || __fail "no spec directory on the standard input"
__size=$((64 << 20)) __cwd=/ __timeout=10 __ticks=40 __stdin=/dev/null __stdin_from= __limit=$((4 << 20))
__nproc=256 __mem=$((1 << 20)) __hostname=fleetgate
__ro=() __dirs=() __empty=() __put=() __rodirs=() __trees=()
while IFS= read -r -d '' __op; do
    case $__op in
        size) IFS= read -r -d '' __size ;;
        cwd) IFS= read -r -d '' __cwd ;;
        timeout) IFS= read -r -d '' __timeout ;;
        ticks) IFS= read -r -d '' __ticks ;;
        stdin) IFS= read -r -d '' __stdin_from; __stdin=/run/fleetgate/stdin ;;
        limit) IFS= read -r -d '' __limit ;;
        nproc) IFS= read -r -d '' __nproc ;;
        mem) IFS= read -r -d '' __mem ;;
        hostname) IFS= read -r -d '' __hostname ;;
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

# --- Before pivot_root: fixed paths of the new root only. ---------------------------------------
# The overlay's upper layer sits in the same tmpfs (/.usr-upper), so one size bounds every write.
__root=$__spec/mnt
mount -t tmpfs -o "size=$__size,mode=0755,nosuid,nodev" fleetgate "$__root" || __fail "cannot mount a tmpfs"
mkdir -p -- "$__root"/{usr,etc,dev,proc,.old,.fg,.fg-repo,.usr-upper/u,.usr-upper/w,run/fleetgate/out} \
    "${__rodirs[@]/#/$__root}" || __fail "cannot lay out the sandbox root"
# Read-only binds, in one mount(8): this machine's programs (/usr; writable later through an overlay
# whose writes land in the tmpfs), the /lib-like directories that are no link to /usr, the devices
# (the sandbox's own /dev, with this machine's null, zero, full, random and urandom bound in
# read-only: data still flows, but no one inside can change their mode, owner or times), and the
# fleet repository at fixed staging paths (/.fg-repo/N) that the mount points of the fleet's own
# choosing are bound from after pivot_root. A repository record "." is this process's working
# directory: bound without walking the path to it (mount -c), so it binds where only its owner may
# enter the directories above it.
__tab=
__bind_ro /usr "$__root/usr"
for __d in "${__rodirs[@]}"; do
    __bind_ro "$__d" "$__root$__d"
done
for __d in null zero full random urandom; do
    if [[ -c /dev/$__d ]]; then
        : >"$__root/dev/$__d" || __fail "cannot lay out /dev"
        __bind_ro "/dev/$__d" "$__root/dev/$__d"
    fi
done
for ((__i = 0; __i < ${#__ro[@]}; __i += 2)); do
    mkdir -- "$__root/.fg-repo/$__i" || __fail "cannot lay out the sandbox root"
    __bind_ro "${__ro[__i]}" "$__root/.fg-repo/$__i"
done
printf '%s' "$__tab" >"$__spec/fstab" || __fail "cannot write the sandbox's mount table"
mount -a -c -T "$__spec/fstab" || __fail "cannot bind this machine's programs, devices and the repository read-only"
# A proc of this PID namespace only, and of its processes only (subset=pid: no /proc/sys to write,
# no cpuinfo, meminfo or version to read); where the kernel has no subset=pid (before 5.8), a full
# one with /proc/sys and /proc/sysrq-trigger read-only; where the machine forbids it, none at all.
if ! mount -t proc -o subset=pid,nosuid,nodev,noexec proc "$__root/proc" 2>/dev/null; then
    if mount -t proc -o nosuid,nodev,noexec proc "$__root/proc" 2>/dev/null; then
        mount --bind -o ro "$__root/proc/sys" "$__root/proc/sys" &&
            mount --bind -o ro "$__root/proc/sysrq-trigger" "$__root/proc/sysrq-trigger" ||
            __fail "cannot make /proc/sys read-only"
    fi
fi
# The caller's trees: the links to /usr (/bin, /lib, ...), /dev/fd, what programs need of /etc to start
# (the update-alternatives links, the loader's cache: no passwd, no keys, no hosts), /run/fleetgate
# and the stubs' contents (/.fg/blob).
if ((${#__trees[@]})); then
    cp -dR --preserve=mode -- "${__trees[@]/%//.}" "$__root/" || __fail "cannot copy the sandbox tree"
fi
if [[ -n $__stdin_from ]]; then
    cp -- "$__stdin_from" "$__root/run/fleetgate/stdin" || __fail "cannot copy the input"
fi
# A host name of its own (UTS namespace): not this machine's.
hostname -- "$__hostname" 2>/dev/null

# The new root becomes the only root: this machine's file system is not reachable from it.
cd "$__root" && pivot_root . .old || __fail "pivot_root failed"
cd / && umount -l /.old || __fail "cannot detach this machine's root"

# --- After pivot_root: only the sandbox's own tree is reachable. --------------------------------
# The directories of /usr the caller writes into (stubs in /usr/local/bin, ...) are made in the upper
# layer first: a merged directory takes the upper one's owner, so the sandbox's uid 0 may create
# files in it even where this machine's directory belongs to a user not mapped here (root, when the
# sandbox runs as a user of its own).
__upper=()
for __p in "${__dirs[@]}"; do
    [[ $__p == /usr/* ]] && __upper+=("/.usr-upper/u/${__p#/usr/}")
done
((${#__upper[@]})) && mkdir -p -- "${__upper[@]}" 2>/dev/null
mount -t overlay overlay -o lowerdir=/usr,upperdir=/.usr-upper/u,workdir=/.usr-upper/w /usr 2>/dev/null
# The fleet's directories and placeholders, then the repository over them, then the stubs over both.
((${#__dirs[@]})) && mkdir -p -- "${__dirs[@]}" 2>/dev/null
for __p in "${__empty[@]}"; do
    [[ -e $__p ]] || : 2>/dev/null >"$__p"
done
# A directory or stub asked for under a repository mount point that the repository does not hold (a build
# tree the script enters, an engine by a path inside deploy_root) goes into a layer of the tmpfs
# (/.fg-layer/N, holding nothing else), and that mount point becomes a read-only overlay of the layer over
# the repository: still read-only, the repository's files as they are, the missing paths there. Where the
# kernel refuses the overlay, the plain bind (and no such path) as before.
__tab=
for ((__i = 0; __i < ${#__ro[@]}; __i += 2)); do
    __m=${__ro[__i + 1]} __layer=/.fg-layer/$__i __any=0
    [[ -d $__m ]] || __fail "cannot make the mount point $__m"
    for __p in "${__dirs[@]}"; do
        __rel=${__p#"$__m"/}
        if [[ $__p == "$__m"/* && ! -e /.fg-repo/$__i/$__rel && ! -L /.fg-repo/$__i/$__rel ]]; then
            mkdir -p -- "$__layer/$__rel" 2>/dev/null && __any=1
        fi
    done
    for ((__j = 0; __j < ${#__put[@]}; __j += 2)); do
        __t=${__put[__j + 1]}
        __rel=${__t#"$__m"/}
        if [[ $__t == "$__m"/* && ! -e /.fg-repo/$__i/$__rel && ! -L /.fg-repo/$__i/$__rel ]]; then
            [[ $__rel == */* ]] && mkdir -p -- "$__layer/${__rel%/*}" 2>/dev/null
            IFS= read -r -d '' __content <"/.fg/blob/${__put[__j]}"
            printf '%s' "$__content" 2>/dev/null >"$__layer/$__rel" && chmod 0755 -- "$__layer/$__rel" && __any=1
        fi
    done
    if ((__any)) && mount -t overlay overlay -o "ro,lowerdir=$__layer:/.fg-repo/$__i" "$__m" 2>/dev/null; then
        continue
    fi
    __bind_ro "/.fg-repo/$__i" "$__m"
done
if [[ -n $__tab ]]; then
    printf '%s' "$__tab" >/.fg/fstab && mount -a -T /.fg/fstab || __fail "cannot mount the repository"
fi
# Stubs (every directory the engine could be started from): written with builtins and made
# executable in one go; where a file is already there, bound over it read-only.
__made=() __tab=
for ((__i = 0; __i < ${#__put[@]}; __i += 2)); do
    __src=/.fg/blob/${__put[__i]} __target=${__put[__i + 1]}
    if [[ -e $__target ]]; then
        [[ -f $__target ]] && __bind_ro "$__src" "$__target"
        continue
    fi
    IFS= read -r -d '' __content <"$__src"
    if printf '%s' "$__content" 2>/dev/null >"$__target"; then
        __made+=("$__target")
    fi
done
((${#__made[@]})) && chmod 0755 -- "${__made[@]}"
if [[ -n $__tab ]]; then
    printf '%s' "$__tab" >/.fg/fstab && mount -a -T /.fg/fstab 2>/dev/null
fi

__out=/run/fleetgate/out
# The command is uid 0 here. When fleetgate runs as root (--mapped: uid 0 here is an unprivileged
# host user) it keeps the two capabilities that let it read the repository, which the host's root
# owns, as before; else none.
__caps=-all
[[ ${1-} == --mapped ]] && __caps=-all,+dac_override,+dac_read_search
# The command: no other capability (so no mount, no chroot, no remount of the read-only repository,
# no chmod or touch of a file it does not own), no privilege gain, at most $__nproc processes of its
# user here and $__mem KiB of address space each, an environment of exactly what the caller passed.
(
    cd -- "$__cwd" 2>/dev/null || cd /
    ulimit -u "$__nproc" -v "$__mem" || exit 71
    exec setpriv --no-new-privs --inh-caps=-all --ambient-caps=-all --bounding-set="$__caps" -- env -i -- "${__env[@]}" "${__cmd[@]}" <"$__stdin" >"$__out/stdout" 2>"$__out/stderr"
) &
__pid=$!
# The watchdog: every quarter second, is the namespace at its process limit (can a process under the
# limit still fork? coreutils' timeout forks once, without retrying, and exits 125 when it cannot)?
# At the end, out of time. (Counting /proc/[0-9]* instead never ends under a fork bomb: the directory
# grows as fast as it is read.)
(
    exec 2>/dev/null
    for ((__t = 0; __t < __ticks; __t++)); do
        sleep 0.25
        (ulimit -u "$__nproc" && exec timeout 5 true)
        if (($? == 125)); then
            : >/.fg/flooded
            kill -KILL -1
            exit 0
        fi
    done
    : >/.fg/timed-out
    kill -KILL -1
) &
wait "$__pid"
__rc=$?
# A full scratch: 64 KiB no longer fit (builtins only).
__full=0
printf '%65536s' '' 2>/dev/null >/.fg/probe || __full=1
: 2>/dev/null >/.fg/probe
# Every process of the namespace but this one: background children, daemons, the watchdog.
kill -KILL -1 2>/dev/null
wait 2>/dev/null
__timed_out=0 __flooded=0
[[ -e /.fg/timed-out ]] && __timed_out=1
[[ -e /.fg/flooded ]] && __flooded=1
printf 'fleetgate-status rc=%s timed-out=%s flooded=%s full=%s\n' "$__rc" "$__timed_out" "$__flooded" "$__full" >&2
exec tar -c -f - -C "$__out" .
