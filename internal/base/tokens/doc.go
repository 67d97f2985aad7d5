// Package tokens keeps the per-user records of secrets under ~/.iii that one process writes and
// another finds: the project tokens Compose records for `iii call` (project.go), the owner
// credential an engine writes for a Compose of the same user (owner.go), both keyed by the
// engine's address (addr.go).
package tokens
