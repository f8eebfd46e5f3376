//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing here: only Linux kills a child when its parent
// dies. A benchmark killed with SIGKILL leaves its redis-server running.
func dieWithParent(*exec.Cmd) {}
