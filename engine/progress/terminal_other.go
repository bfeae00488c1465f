//go:build !linux && !darwin

package progress

// isTerminalFd says false where apollo does not know how to ask: apollo
// run then prints plain lines unless --progress board asks for the board.
func isTerminalFd(fd int) bool { return false }
