package testscripts

// The demo scenario runs the project's own worker of fixtures/demo (`go tool mage demo`).
func init() {
	registerBinary(binary{name: "iii-demo-worker", pkg: "./internal/demoworker", version: "0.0.0-test"})
}
