//go:build contract02

package main

// reportsEnv: this build answers worker::start as a 0.2 adapter (see the package doc).
const reportsEnv = true
