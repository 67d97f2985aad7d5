//go:build !linux

package supervisor

// Owns reports whether process pid belongs to the child name; outside Linux only the child's
// own process is recognised.
func (s *Supervisor) Owns(name string, pid int) bool {
	p := s.Get(name)
	return p != nil && pid > 0 && pid == p.PID
}
