//go:build unix && !linux

package devstack

import "syscall"

// setParentDeathSignal does nothing: only Linux has a parent-death signal. If we die without
// calling Stop, the server keeps running until killed.
func setParentDeathSignal(*syscall.SysProcAttr) {}
