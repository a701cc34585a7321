# Read by interactive zsh in a terminal of the service: the user's own .zshrc,
# then hooks that report each command line and each prompt (with the exit
# status) to the service as invisible escape sequences. The secret that
# authenticates them is kept in an unexported variable.
typeset -g __terminals_secret=$TERMINALS_SHELL_SECRET
unset TERMINALS_SHELL_SECRET
# A nested zsh must read the user's own files, not these again.
if [[ -n ${TERMINALS_USER_ZDOTDIR:-} ]]; then
    export ZDOTDIR=$TERMINALS_USER_ZDOTDIR
else
    unset ZDOTDIR
fi
unset TERMINALS_USER_ZDOTDIR
[[ -f ${ZDOTDIR:-$HOME}/.zshrc ]] && source "${ZDOTDIR:-$HOME}/.zshrc"

__terminals_preexec() {
    printf '\033]6973;%s;C;%s\007' "$__terminals_secret" "${1//[$'\a\e']/}"
}

__terminals_precmd() {
    local exit_status=$?
    printf '\033]6973;%s;P;%s\007' "$__terminals_secret" "$exit_status"
    return $exit_status
}

# Agents send commands with trailing comments; without this zsh would take "#" literally.
setopt interactive_comments

autoload -Uz add-zsh-hook
add-zsh-hook preexec __terminals_preexec
# First, so it sees the command's status before any other hook changes it.
precmd_functions=(__terminals_precmd ${precmd_functions[@]})
