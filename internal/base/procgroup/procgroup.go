// Package procgroup starts children in their own process group, tied to their parent's life
// where the OS allows it, and signals whole groups. It keeps the per-OS system calls in one place
// so that the packages owning child processes build for every release target.
package procgroup
