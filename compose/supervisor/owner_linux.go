//go:build linux

package supervisor

import "os"

// Owns reports whether process pid belongs to the child name: it runs in the child's process
// group, or carries the marker this Compose gave the child (a descendant that left the group).
func (s *Supervisor) Owns(name string, pid int) bool {
	p := s.Get(name)
	if p == nil || pid <= 0 {
		return false
	}
	if pid == p.PID {
		return true
	}
	if pr, ok := scan()[pid]; ok && pr.pgid == p.PID {
		return true
	}
	return hasMarker(pid, marker(os.Getpid(), name), false)
}
