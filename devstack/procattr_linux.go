package devstack

import "syscall"

// setParentDeathSignal makes the child die when we die without stopping it (backends follow
// the postmaster). Linux sends the signal when the forking OS thread exits; the Go runtime only
// ends a thread when a goroutine exits while locked to it (runtime.LockOSThread), which is rare.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGKILL
}
