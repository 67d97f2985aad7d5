//go:build !unix

package dirlock

// Lock is a no-op where flock does not exist.
func Lock(dir, name string) (func(), error) { return func() {}, nil }
