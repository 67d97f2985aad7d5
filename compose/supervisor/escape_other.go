//go:build !linux

package supervisor

import "sync"

// adopt is a no-op outside Linux, which alone has child subreapers: there a descendant that
// leaves its process group escapes the supervisor.
var adopt = sync.OnceValue(func() error { return nil })

func escapees(name string, leader int) []int { return nil }

func killDescendants(keep int) {}

func killMarked(composePID int) {}
