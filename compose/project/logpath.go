package project

// LogPath is the log file of a container (compose::logs reads it).
func (p *Project) LogPath(key string) string { return p.opts.State.LogPath(key) }
