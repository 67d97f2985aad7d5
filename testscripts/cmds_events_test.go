package testscripts

// The product workers of issue 17 (workers/cmd/*), built for the events/ scenarios under the
// names Compose runs them by.
func init() {
	for _, name := range []string{"state", "queue", "cron"} {
		registerBinary(binary{name: name, pkg: "./workers/cmd/" + name, vfile: "workers/VERSION"})
	}
}
