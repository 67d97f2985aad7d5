package project

// LogPath is the log file of a container (compose::logs reads it).
func (p *Project) LogPath(key string) string { return p.opts.State.LogPath(key) }

// Running reports whether key is starting, ready, or waiting for its restart policy.
func (p *Project) Running(key string) bool { return p.running(key) }

// Body turns an error into its {code, message}.
func Body(err error) *CodedBody { return body(err) }
