//go:build linux

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/iii-go/iii/sandbox-libkrun/guest/fsops"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
	"golang.org/x/sys/unix"
)

type mountReq = proto.GuestMount

// agent serves the control port.
type agent struct {
	port *os.File
	wmu  sync.Mutex

	mu      sync.Mutex
	execs   map[uint32]*running
	streams map[uint32]*proto.Stream // streamed fs ops (stream.go)
	zygote  *zygote                  // an interpreter waiting to be forked (zygote.go)

	procs *procTable // long-lived processes (process.go)

	conns map[uint32]*proto.ConnEnd // connections to guest ports the host dialled (conn.go); guarded by mu

	spawnMu  sync.Mutex   // held while starting a command and while reaping orphans
	children map[int]bool // PIDs of running commands, reaped by their own Wait
}

func newAgent(port *os.File) *agent {
	a := &agent{port: port, execs: map[uint32]*running{}, streams: map[uint32]*proto.Stream{}, children: map[int]bool{}, procs: newProcTable(), conns: map[uint32]*proto.ConnEnd{}}
	go a.reapOrphans()
	return a
}

func (a *agent) send(f proto.Frame) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if err := proto.Write(a.port, f); err != nil {
		fmt.Fprintf(os.Stderr, "guest agent: write: %v\n", err)
	}
}

func (a *agent) sendJSON(t proto.Type, id uint32, v any) {
	f, err := proto.Marshal(t, id, v)
	if err != nil {
		f, _ = proto.Marshal(proto.TypeReply, id, proto.Reply{Error: &proto.Error{Message: err.Error()}})
	}
	a.send(f)
}

func (a *agent) replyErr(id uint32, err error) {
	a.sendJSON(proto.TypeReply, id, proto.Reply{Error: &proto.Error{Message: err.Error()}})
}

// decodeFrame reads f's JSON payload into a T. A payload that is not one is answered with the
// error, so the host's request fails rather than waits, and ok is false.
func decodeFrame[T any](a *agent, f proto.Frame) (v T, ok bool) {
	if err := json.Unmarshal(f.Payload, &v); err != nil {
		a.replyErr(f.ID, err)
		return v, false
	}
	return v, true
}

// serve answers frames until the host asks for shutdown or the port closes.
func (a *agent) serve() error {
	a.hello()
	r := bufio.NewReaderSize(a.port, proto.ReadBuffer)
	for {
		f, err := proto.Read(r)
		if err != nil {
			return fmt.Errorf("control port: %w", err)
		}
		switch f.Type {
		case proto.TypeShutdown:
			a.killAll()
			a.killProcs()
			return nil
		case proto.TypePing:
			a.sendJSON(proto.TypeReply, f.ID, proto.Reply{})
		case proto.TypeInit:
			a.setup(f)
		case proto.TypeResume:
			a.resume(f)
		case proto.TypePrestart:
			go a.prestart(f)
		case proto.TypeExec:
			var ex proto.Exec
			if err := json.Unmarshal(f.Payload, &ex); err != nil {
				a.sendJSON(proto.TypeExecDone, f.ID, proto.ExecDone{Stderr: []byte(err.Error()), ExitCode: intp(126)})
				continue
			}
			go a.exec(f.ID, ex)
		case proto.TypeKill:
			var k proto.Kill
			if json.Unmarshal(f.Payload, &k) == nil {
				a.signal(f.ID, unix.Signal(k.Signal))
			}
		case proto.TypeFS:
			a.fsOp(f)
		case proto.TypeData, proto.TypeEnd, proto.TypeCredit:
			if !a.deliverProc(f) && !a.deliverConn(f) {
				a.deliverStream(f)
			}
		case proto.TypeDial:
			a.dial(f)
		case proto.TypeProcStart, proto.TypeProcAttach, proto.TypeProcList, proto.TypeProcSignal, proto.TypeProcWait, proto.TypeProcResize:
			a.procRequest(f)
		}
	}
}

// hello sends the Hello frame: the kernel, the agent version and the boot phase times.
func (a *agent) hello() {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	a.sendJSON(proto.TypeHello, 0, proto.Hello{
		KernelRelease: unix.ByteSliceToString(uts.Release[:]), Agent: proto.AgentVersion,
		UptimeMS: uptime().Milliseconds(), ModulesMS: modulesTime.Milliseconds(), InitMS: initUptime.Milliseconds(),
	})
}

// setup answers an Init frame: it seeds entropy, loads the modules asked for, mounts the root and
// brings up loopback and, when asked, the network.
func (a *agent) setup(f proto.Frame) {
	in, ok := decodeFrame[proto.Init](a, f)
	if !ok {
		return
	}
	if err := seedEntropy(in.Entropy); err != nil {
		fmt.Fprintf(os.Stderr, "guest agent: entropy: %v\n", err)
	}
	if in.Hostname != "" {
		if err := unix.Sethostname([]byte(in.Hostname)); err != nil {
			a.replyErr(f.ID, fmt.Errorf("hostname: %w", err))
			return
		}
	}
	if in.Network {
		if err := loadNetModules(); err != nil {
			a.replyErr(f.ID, fmt.Errorf("network: %w", err))
			return
		}
	}
	fsType := "virtiofs"
	switch in.Share {
	case proto.Share9P:
		if err := loadModules("/lib/modules/order.9p"); err != nil {
			a.replyErr(f.ID, fmt.Errorf("9p: %w", err))
			return
		}
		fsType = "9p"
	case proto.ShareBlock:
		if err := loadModules("/lib/modules/order.blk"); err != nil {
			a.replyErr(f.ID, fmt.Errorf("block root: %w", err))
			return
		}
		if err := waitDevice(blockRoot, 5*time.Second); err != nil {
			a.replyErr(f.ID, fmt.Errorf("block root: %w", err))
			return
		}
		fsType = "ext4"
		in.RootTag = blockRoot
	}
	if err := setupRoot(fsType, in.RootTag, in.ScratchMB, in.StateDisk, in.Mounts); err != nil {
		a.replyErr(f.ID, err)
		return
	}
	if err := setupLoopback(); err != nil {
		fmt.Fprintf(os.Stderr, "guest agent: loopback: %v\n", err)
	}
	if in.Network {
		if err := setupNetwork(); err != nil {
			a.replyErr(f.ID, fmt.Errorf("network: %w", err))
			return
		}
	}
	a.sendJSON(proto.TypeReply, f.ID, proto.Reply{})
}

// resume answers a Resume frame, the first one a machine restored from a snapshot gets: its own
// randomness (credited, then the generator reseeded, so no two copies of one snapshot share
// their random stream), the host's clock and its host name.
func (a *agent) resume(f proto.Frame) {
	r, ok := decodeFrame[proto.Resume](a, f)
	if !ok {
		return
	}
	if err := reseedEntropy(r.Entropy); err != nil {
		a.replyErr(f.ID, fmt.Errorf("entropy: %w", err))
		return
	}
	if r.UnixNano > 0 {
		ts := unix.NsecToTimespec(r.UnixNano)
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
			a.replyErr(f.ID, fmt.Errorf("clock: %w", err))
			return
		}
	}
	if r.Hostname != "" {
		if err := unix.Sethostname([]byte(r.Hostname)); err != nil {
			a.replyErr(f.ID, fmt.Errorf("hostname: %w", err))
			return
		}
	}
	res, _ := json.Marshal(proto.Resumed{Agent: proto.AgentVersion})
	a.sendJSON(proto.TypeReply, f.ID, proto.Reply{Result: res})
}

// fsOp answers an FS frame: read and streamed write run as streams, every other op replies once.
func (a *agent) fsOp(f proto.Frame) {
	req, ok := decodeFrame[proto.FS](a, f)
	if !ok {
		return
	}
	switch {
	case req.Op == "read":
		go a.streamRead(f.ID, a.openStream(f.ID), req.Request)
	case req.Op == "write" && req.Stream:
		go a.streamWrite(f.ID, a.openStream(f.ID), req.Request)
	default:
		go func(id uint32) {
			res, ferr := fsops.Do(req.Op, req.Request)
			a.fsReply(id, res, ferr)
		}(f.ID)
	}
}

func intp(v int) *int { return &v }
