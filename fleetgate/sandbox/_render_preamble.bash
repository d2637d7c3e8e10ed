# fleetgate render preamble: bash reads this (BASH_ENV) before the serve script, inside the render's
# sandbox. It answers the script's questions about the host from the fleet's declaration: repository
# files are read from the repository (confined by their real path, after `..` and symlinks), declared
# payload files exist, the engine exists wherever the script looks for it. It records what the
# script sourced and tested, NUL-separated (a path may hold a tab or a newline).
__fg_out=$FLEETGATE_RENDER_OUT
__fg_readlink=${__fg_out%/out}/tools/readlink
unset FLEETGATE_RENDER_OUT BASH_ENV

# The repository file a host path names, by its real path; fails for anything outside the repository.
__fg_map() {
    local p=$1 local_path real
    if [[ -n $__FG_DEPLOY_ROOT && ( $p == "$__FG_DEPLOY_ROOT" || $p == "$__FG_DEPLOY_ROOT"/* ) ]]; then
        local_path=$__FG_REPO${p#"$__FG_DEPLOY_ROOT"}
    elif [[ $p == "$__FG_REPO" || $p == "$__FG_REPO"/* ]]; then
        local_path=$p
    else
        return 1
    fi
    real=$(command "$__fg_readlink" -m -- "$local_path") || return 1
    if [[ $real == "$__FG_REPO" || $real == "$__FG_REPO"/* ]]; then
        printf '%s' "$real"
        return 0
    fi
    if [[ -n $__FG_DEPLOY_ROOT && ( $real == "$__FG_DEPLOY_ROOT" || $real == "$__FG_DEPLOY_ROOT"/* ) ]]; then
        printf '%s' "$__FG_REPO${real#"$__FG_DEPLOY_ROOT"}"
        return 0
    fi
    return 1
}

__fg_is_payload() {
    local p=$1 f
    while IFS= read -r f; do
        [[ -n $f && $p == "$f" ]] && return 0
    done <<<"$__FG_PAYLOAD"
    return 1
}

__fg_is_payload_dir() {
    local p=${1%/} f
    while IFS= read -r f; do
        [[ -n $f && $f == "$p"/* ]] && return 0
    done <<<"$__FG_PAYLOAD"
    return 1
}

__fg_apply_overrides() {
    eval "$__FG_OVERRIDES"
}

__fg_source() {
    local target=$1 local_path caller="${BASH_SOURCE[2]-}:${BASH_LINENO[1]-}"
    shift
    if [[ $target != /* ]]; then
        target="$PWD/$target"
    fi
    if ! local_path=$(__fg_map "$target"); then
        printf 'outside\0%s\0%s\0' "$target" "$caller" >>"$__fg_out/sources"
        printf '%s: fleetgate: %s is not a file of this fleet repository, so the render cannot read it\n' "$caller" "$target" >&2
        return 1
    fi
    printf 'repo\0%s\0%s\0' "$target" "$caller" >>"$__fg_out/sources"
    builtin source "$local_path" "$@"
    local rc=$?
    __fg_apply_overrides
    return $rc
}
source() { __fg_source "$@"; }
.() { __fg_source "$@"; }

__fg_file_test() {
    local op=$1 path=$2 caller=$3 mapped answer
    if [[ ${path##*/} == "$__FG_BINARY" ]]; then
        # The engine is wherever the script looks for it; the render stubs it at that path.
        case $op in -e|-f|-r|-s|-x) answer=0 ;; *) answer=1 ;; esac
    elif mapped=$(__fg_map "$path"); then
        builtin test "$op" "$mapped"
        answer=$?
    elif __fg_is_payload "$path"; then
        case $op in -e|-f|-r|-s|-x) answer=0 ;; *) answer=1 ;; esac
    elif __fg_is_payload_dir "$path"; then
        case $op in -e|-d|-r|-x) answer=0 ;; *) answer=1 ;; esac
    else
        answer=1
    fi
    printf '%s\0%s\0%s\0%s\0' "$op" "$path" "$answer" "$caller" >>"$__fg_out/tests"
    return $answer
}

__fg_test() {
    local caller=$1 bracket=$2
    shift 2
    local -a args=("$@")
    if [[ $bracket == 1 ]]; then
        if [[ ${#args[@]} -eq 0 || ${args[-1]} != "]" ]]; then
            printf '%s: [: missing `]'"'"'\n' "$caller" >&2
            return 2
        fi
        unset 'args[-1]'
    fi
    local negate=0
    if [[ ${#args[@]} -eq 3 && ${args[0]} == "!" ]]; then
        negate=1
        args=("${args[@]:1}")
    fi
    if [[ ${#args[@]} -eq 2 && ${args[0]} =~ ^-[efrsdxwLhbcpSgukOGN]$ && ${args[1]} == /* ]]; then
        __fg_file_test "${args[0]}" "${args[1]}" "$caller"
        local rc=$?
        if [[ $negate == 1 ]]; then
            return $((1 - rc))
        fi
        return $rc
    fi
    if [[ $negate == 1 ]]; then
        builtin test ! "${args[@]}"
    else
        builtin test "${args[@]}"
    fi
}
test() { __fg_test "${BASH_SOURCE[1]-}:${BASH_LINENO[0]-}" 0 "$@"; }
[() { __fg_test "${BASH_SOURCE[1]-}:${BASH_LINENO[0]-}" 1 "$@"; }

__fg_apply_overrides

# The unit's own BASH_ENV: bash expands its value and reads that file before the script; here from the
# repository only (a file outside it is said on stderr, as bash says a missing one, and the script
# runs on), and the variable is put back for the bash processes the script starts.
if [[ -n ${__FG_BASH_ENV+x} ]]; then
    BASH_ENV=$__FG_BASH_ENV
    export BASH_ENV
    unset __FG_BASH_ENV
    if [[ $BASH_ENV == *[\$\`]* ]]; then
        eval "__fg_bash_env=\"${BASH_ENV//\"/\\\"}\""
    else
        __fg_bash_env=$BASH_ENV
    fi
    if [[ -n $__fg_bash_env ]]; then
        [[ $__fg_bash_env == /* ]] || __fg_bash_env=$PWD/$__fg_bash_env
        if __fg_bash_env_local=$(__fg_map "$__fg_bash_env"); then
            printf 'repo\0%s\0%s\0' "$__fg_bash_env" "$__FG_BASH_ENV_WHERE" >>"$__fg_out/sources"
            builtin source "$__fg_bash_env_local"
            __fg_apply_overrides
        else
            printf 'outside\0%s\0%s\0' "$__fg_bash_env" "$__FG_BASH_ENV_WHERE" >>"$__fg_out/sources"
            printf '%s: fleetgate: BASH_ENV=%s is not a file of this fleet repository, so the render cannot read it\n' \
                "$__FG_BASH_ENV_WHERE" "$__fg_bash_env" >&2
        fi
    fi
    unset __fg_bash_env __fg_bash_env_local
fi

# A script that starts the engine in the background (`nohup vllm serve ... &`) may end before the engine's stub
# has recorded anything, and the sandbox ends every process left when the script ends: on exit, the script's
# running jobs get a bounded while (2 s) to finish. A script that sets its own EXIT trap replaces this one.
__fg_wait_jobs() {
    local i
    for ((i = 0; i < 40; i++)); do
        [[ -z $(jobs -rp) ]] && return 0
        command "${__fg_out%/out}/tools/sleep" 0.05
    done
}
trap __fg_wait_jobs EXIT

# Trace the script's own lines to a file, so a refusal can name the line the script exited on.
exec {__fg_trace_fd}>>"$__fg_out/trace"
BASH_XTRACEFD=$__fg_trace_fd
PS4='+${BASH_SOURCE[0]-}:${LINENO}: '
set -x
