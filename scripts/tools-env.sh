# Sourced by the setup and check scripts: where project-local tools (helm) live, on PATH.
# Override the location with AX_TOOLS_DIR.
AX_TOOLS_DIR=${AX_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ax-tools}
AX_TOOLS_BIN=$AX_TOOLS_DIR/bin
case ":$PATH:" in
  *":$AX_TOOLS_BIN:"*) ;;
  *) PATH=$AX_TOOLS_BIN:$PATH ;;
esac
export AX_TOOLS_DIR AX_TOOLS_BIN PATH
