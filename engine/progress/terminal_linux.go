package progress

import "golang.org/x/sys/unix"

// isTerminalFd reports whether fd is a terminal: whether it has terminal
// attributes to read (the TCGETS ioctl).
func isTerminalFd(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}
