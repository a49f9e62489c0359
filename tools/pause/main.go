// pause: the process that holds a pod's namespaces (the image the kubelet runs as every pod's sandbox).
// It sleeps until SIGTERM or SIGINT, then exits 0; as PID 1 of a pod that shares its PID namespace it
// also reaps the orphans re-parented to it. Built static, run from a FROM-scratch image as uid 65535.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const version = "3.10"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause.go", version)
		return
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "shutting down, got signal %v\n", sig)
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited, without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
