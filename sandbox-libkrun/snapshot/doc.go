// Package snapshot keeps the snapshots sandboxes are restored from: for each image a read-only
// ext4 root disk and a saved machine booted on it to a ready agent, under
// ~/.iii/sandbox/snapshots/, keyed by what a restored machine cannot change.
package snapshot
