//go:build !unix

package debimage

// lockDir does nothing where there is no flock: images are built with apt, on Debian only.
func lockDir(string) (func(), error) { return func() {}, nil }
