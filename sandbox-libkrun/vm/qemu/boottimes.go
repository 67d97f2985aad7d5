package qemu

import (
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

// BootTimes are the host's timestamps of one boot and what the guest agent said of its own
// (Hello: the guest's uptime when /init started, the time it spent loading modules and its
// uptime when the control port opened). A machine returned by Boot reports them.
type BootTimes struct {
	Start       time.Time   // Boot was called
	SharesReady time.Time   // every virtiofsd socket exists (under 9p, where qemu serves the files, at once)
	QemuStarted time.Time   // the qemu process was started
	Hello       time.Time   // the agent's Hello arrived
	Ready       time.Time   // the agent answered Init: the root is assembled
	Guest       proto.Hello // the guest's own account, in milliseconds of its uptime
}

// Phase is one named part of a boot.
type Phase struct {
	Name string
	D    time.Duration
}

// Phases splits the boot into consecutive parts whose sum is Ready-Start: the virtiofsd servers;
// qemu's start and the kernel's earliest boot (the time from qemu's start to Hello minus the
// guest's uptime at Hello: the guest's clock misses qemu's own start and, under TCG, some
// hundred milliseconds of early kernel work such as patching its code); the kernel from its
// clock's start to /init; the agent's module loading; the agent reaching its control port (with
// Hello's trip to the host); and the root's assembly (Hello to Init's reply: the mounts).
func (t BootTimes) Phases() []Phase {
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	g := t.Guest
	toHello := t.Hello.Sub(t.QemuStarted)
	qemuStart := toHello - ms(g.UptimeMS)
	return []Phase{
		{"virtiofsd", t.SharesReady.Sub(t.Start)},
		{"qemu + early kernel", t.QemuStarted.Sub(t.SharesReady) + qemuStart},
		{"kernel to /init", ms(g.InitMS)},
		{"modules", ms(g.ModulesMS)},
		{"agent port + hello", ms(g.UptimeMS - g.InitMS - g.ModulesMS)},
		{"mounts (Init)", t.Ready.Sub(t.Hello)},
	}
}

// BootTimes reports the timestamps of the machine's boot.
func (m *machine) BootTimes() BootTimes { return m.times }
