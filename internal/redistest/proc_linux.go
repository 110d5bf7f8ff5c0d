package redistest

import (
	"os/exec"
	"syscall"
)

// DieWithParent has cmd's process killed when the process that starts it
// ends, however it ends: a test binary that panics or is killed runs no
// cleanup, and would leave its redis-servers running.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
