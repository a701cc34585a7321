# zsh in a terminal of the service starts with ZDOTDIR here: read the user's own .zshenv.
[[ -f ${TERMINALS_USER_ZDOTDIR:-$HOME}/.zshenv ]] && source "${TERMINALS_USER_ZDOTDIR:-$HOME}/.zshenv"
