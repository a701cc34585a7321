# Read by interactive zsh in a terminal of the service: the user's own .zshrc,
# then hooks that report each command line and each prompt (with the exit
# status) to the service as invisible escape sequences, signed with the secret
# that .zshenv read.
# A nested zsh must read the user's own files, not these again.
if [[ -n ${TERMINALS_USER_ZDOTDIR:-} ]]; then
    export ZDOTDIR=$TERMINALS_USER_ZDOTDIR
else
    unset ZDOTDIR
fi
unset TERMINALS_USER_ZDOTDIR
[[ -f ${ZDOTDIR:-$HOME}/.zshrc ]] && source "${ZDOTDIR:-$HOME}/.zshrc"

# Each hook turns tracing off for itself: under xtrace, the shell would print the secret
# to the terminal along with the rest of the hook's commands.
__terminals_preexec() {
    setopt local_options no_xtrace
    printf '\033]6973;%s;C;%s\007' "$__terminals_secret" "${1//[$'\a\e']/}"
}

__terminals_precmd() {
    local exit_status=$?
    setopt local_options no_xtrace
    printf '\033]6973;%s;P;%s\007' "$__terminals_secret" "$exit_status"
    return $exit_status
}

# API commands are typed between these two: their markers name the command and carry the
# secret, which the typed text does not. The end keeps printf's status, as set -e expects.
__terminals_begin() {
    setopt local_options no_xtrace
    builtin printf '\033]6973;%s;B;%s\007' "$__terminals_secret" "$1"
}

__terminals_end() {
    setopt local_options no_xtrace
    builtin printf '\033]6973;%s;E;%s;%s\007' "$__terminals_secret" "$1" "$2"
}

# Agents send commands with trailing comments; without this zsh would take "#" literally.
setopt interactive_comments

autoload -Uz add-zsh-hook
add-zsh-hook preexec __terminals_preexec
# First, so it sees the command's status before any other hook changes it.
precmd_functions=(__terminals_precmd ${precmd_functions[@]})
