package qemu

import (
	"errors"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// A spec that cannot boot fails as a *vm.BootError before any process starts, with the
// message text unchanged.
func TestCheckSpecBootErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		spec vm.Spec
		want string
	}{
		{vm.Spec{RootFS: dir, MemoryMB: 64}, "VM boot failed: memory_mb 64 is below the 128 MiB minimum"},
		{vm.Spec{RootFS: missing, MemoryMB: 128}, `VM boot failed: root filesystem "` + missing + `" is not a directory`},
		{vm.Spec{RootFS: dir, MemoryMB: 128, Mounts: []vm.Mount{{Host: missing, Guest: "/m"}}}, `VM boot failed: mount source "` + missing + `" is not a directory`},
		{vm.Spec{RootFS: dir, MemoryMB: 128, HostAccess: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:49134")}},
			"VM boot failed: host access 127.0.0.1:49134: only a loopback address and port of the host, for a machine with networking"},
		{vm.Spec{RootFS: dir, MemoryMB: 128, Network: true, HostAccess: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.2:80")}},
			"VM boot failed: host access 192.0.2.2:80: only a loopback address and port of the host, for a machine with networking"},
		{vm.Spec{RootFS: dir, MemoryMB: 128, Network: true, HostAccess: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}},
			"VM boot failed: host access 127.0.0.1:0: only a loopback address and port of the host, for a machine with networking"},
	} {
		_, err := checkSpec(tc.spec)
		var be *vm.BootError
		if !errors.As(err, &be) || err.Error() != tc.want {
			t.Errorf("checkSpec(%+v) = %v, want a *vm.BootError %q", tc.spec, err, tc.want)
		}
	}
	spec, err := checkSpec(vm.Spec{RootFS: dir, MemoryMB: 256})
	if err != nil || spec.CPUs != 1 || spec.ScratchMB != 128 {
		t.Fatalf("defaults: %+v, %v", spec, err)
	}
}
