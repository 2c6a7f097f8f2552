package convchain

import (
	"os/exec"
	"syscall"
)

// prepareChild puts the search child in a process group of its own, so that
// the kill at the deadline also reaches anything it started (compiler
// processes of the vendor library), and has the kernel kill it if this
// process dies first.
func prepareChild(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
