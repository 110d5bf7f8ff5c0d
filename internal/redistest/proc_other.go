//go:build !linux

package redistest

import "os/exec"

// DieWithParent does nothing where the system cannot tie a child's life
// to its parent's: a test binary that crashes may leave its servers
// running there.
func DieWithParent(*exec.Cmd) {}
