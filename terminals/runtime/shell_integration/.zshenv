# zsh in a terminal of the service starts with ZDOTDIR here: the secret first, then the user's own .zshenv.
# The secret that signs the service's markers arrives on fd 9, a pipe the service wrote and closed: it is
# read once, before anything of the user's runs, and the pipe closed. It is never in
# the environment (/proc/<pid>/environ keeps the first one for good) and never typed.
if [ "${TERMINALS_SHELL_SECRET_FD:-}" = 9 ]; then
    IFS= read -r __terminals_secret <&9
    exec 9<&-
fi
unset TERMINALS_SHELL_SECRET_FD
[[ -f ${TERMINALS_USER_ZDOTDIR:-$HOME}/.zshenv ]] && source "${TERMINALS_USER_ZDOTDIR:-$HOME}/.zshenv"
