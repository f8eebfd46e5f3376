//go:build !linux

package proctest

import "syscall"

// sysProcAttr returns nil: outside Linux the cleanup that [Start] registers is
// the only guard against a helper outliving its test.
func sysProcAttr() *syscall.SysProcAttr { return nil }
