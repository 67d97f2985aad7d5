package adapter

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
)

// warmUps are run once in a pooled machine after boot, so that the first exec of a sandbox
// finds the shell and the image's interpreter in the guest's page cache (under TCG a cold
// python3 start costs about 0.4 s more than a warm one).
var warmUps = map[string][][]string{
	"python": {{"/bin/sh", "-c", "true"}, {"python3", "-c", "pass"}},
	"node":   {{"/bin/sh", "-c", "true"}, {"node", "-e", "0"}},
}

var defaultWarmUp = [][]string{{"/bin/sh", "-c", "true"}}

// warmFile is the file a pooled machine's warm-up writes and removes.
const warmFile = "/tmp/.iii-pool-warm-up"

// prestarts are the interpreters a pooled machine starts ahead of the sandbox's first script
// (vm.Prestarter): under TCG python3's start-up is most of a short script's run.
var prestarts = map[string]string{"python": "python3"}

// PoolStatus is one image's warm pool as adapter::info shows it.
type PoolStatus struct {
	Size    uint32 `json:"size"`    // machines kept warm
	Ready   int    `json:"ready"`   // booted and waiting
	Booting int    `json:"booting"` // boots in flight
	Served  uint64 `json:"served"`  // creates and runs served by a pooled machine
	Error   string `json:"error,omitempty"`
}

// pool keeps pre-booted machines per image with the settings' default cpus and memory, no
// network and no environment. Its machines are not sandboxes: they are not listed and do not
// count toward max_concurrent_sandboxes until a create takes one.
type pool struct {
	s      *Service
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	images map[string]*poolImage
}

type poolImage struct {
	name    string
	size    int
	ready   []pooled
	booting []*pendingBoot
	served  uint64
	lastErr string
}

// pooled is a booted machine and its state directory.
type pooled struct {
	m        vm.Machine
	stateDir string
}

// pendingBoot is a pool boot in flight; a create may claim it and wait for it.
type pendingBoot struct {
	claimed bool
	done    chan struct{}
	got     pooled
	err     error
}

func newPool(s *Service, sizes map[string]uint32) *pool {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pool{s: s, ctx: ctx, cancel: cancel, images: map[string]*poolImage{}}
	for name, n := range sizes {
		p.images[name] = &poolImage{name: name, size: int(n)}
	}
	p.mu.Lock()
	for _, pi := range p.images {
		p.fillLocked(pi)
	}
	p.mu.Unlock()
	return p
}

// fillLocked starts boots until the image has size machines ready or booting.
func (p *pool) fillLocked(pi *poolImage) {
	for p.ctx.Err() == nil && len(pi.ready)+len(pi.booting) < pi.size {
		pb := &pendingBoot{done: make(chan struct{})}
		pi.booting = append(pi.booting, pb)
		p.wg.Add(1)
		go p.boot(pi, pb)
	}
}

func (p *pool) boot(pi *poolImage, pb *pendingBoot) {
	defer p.wg.Done()
	got, err := p.bootMachine(pi.name)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, b := range pi.booting {
		if b == pb {
			pi.booting = append(pi.booting[:i], pi.booting[i+1:]...)
			break
		}
	}
	switch {
	case err == nil && p.ctx.Err() != nil:
		p.discard(got)
		err = p.ctx.Err()
	case err != nil:
		// No retry here: the next take retries, so a broken image does not boot in a loop.
		pi.lastErr = err.Error()
		p.s.opt.Logf("warm pool (%s): %v", pi.name, err)
	case pb.claimed:
		pb.got = got
		pi.lastErr = ""
	default:
		pi.ready = append(pi.ready, got)
		pi.lastErr = ""
	}
	pb.err = err
	close(pb.done)
	if err == nil {
		p.fillLocked(pi)
	}
}

// bootMachine boots (or, with snapshots on, restores) one pool machine for image and warms it
// up.
func (p *pool) bootMachine(image string) (pooled, error) {
	s := p.s
	img, err := s.cat.Lookup(image)
	if err != nil {
		return pooled{}, err
	}
	rootfs, err := s.opt.Images.Resolve(p.ctx, img.Name, img.OCIRef, s.opt.Settings.AutoInstall)
	if err != nil {
		return pooled{}, err
	}
	id := "p" + strings.ReplaceAll(uuid.NewString(), "-", "")[:15]
	stateDir := filepath.Join(s.opt.StateDir, id)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return pooled{}, err
	}
	mem := int(s.opt.Settings.DefaultMemoryMB)
	var m vm.Machine
	var makeSnapshot func()
	if s.snaps != nil {
		// With snapshots on, a refill is a restore; the first boot of the image makes the snapshot.
		params := createParams{cpus: s.opt.Settings.DefaultCPUs, mem: s.opt.Settings.DefaultMemoryMB}
		m, makeSnapshot = s.snaps.restore(p.ctx, s.streamCtx, id, img.Name, rootfs, params, nil, stateDir)
	}
	if m == nil {
		m, err = s.opt.Driver.Boot(p.ctx, vm.Spec{
			RootFS: rootfs, CPUs: int(s.opt.Settings.DefaultCPUs), MemoryMB: mem, StateDir: stateDir, ScratchMB: mem / 2,
		})
		if err != nil {
			os.RemoveAll(stateDir)
			return pooled{}, err
		}
		if makeSnapshot != nil {
			makeSnapshot()
		}
	}
	got := pooled{m: m, stateDir: stateDir}
	warm, ok := warmUps[image]
	if !ok {
		warm = defaultWarmUp
	}
	for _, argv := range warm {
		// A failing warm-up (an image without the interpreter) leaves the machine usable.
		if _, err := m.Exec(p.ctx, vm.ExecRequest{Argv: argv, Timeout: DefaultExecTimeout, OutputCap: 4096}); err != nil && machineDone(m) {
			p.discard(got)
			return pooled{}, err
		}
	}
	// sandbox::run writes its code first: the agent's file code, translated on first use under
	// TCG, is warmed the same way, by a file written and removed.
	for _, op := range []struct{ name, body string }{{"write", `{"path":"` + warmFile + `","content":""}`}, {"rm", `{"path":"` + warmFile + `"}`}} {
		if _, err := m.FS(p.ctx, op.name, json.RawMessage(op.body)); err != nil && machineDone(m) {
			p.discard(got)
			return pooled{}, err
		}
	}
	if ps, ok := m.(vm.Prestarter); ok && prestarts[image] != "" {
		// Without it the sandbox's scripts start their interpreter as usual.
		if err := ps.Prestart(p.ctx, prestarts[image]); err != nil {
			if machineDone(m) {
				p.discard(got)
				return pooled{}, err
			}
			s.opt.Logf("warm pool (%s): prestarting %s: %v", image, prestarts[image], err)
		}
	}
	return got, nil
}

// discard stops a pool machine and removes its state directory, in the background.
func (p *pool) discard(got pooled) {
	p.s.stops.Add(1)
	go func() {
		defer p.s.stops.Done()
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		_ = got.m.Stop(ctx)
		os.RemoveAll(got.stateDir)
	}()
}

// take hands out a warm machine of image: a ready one, else one whose boot is in flight and
// not yet claimed (it is ahead of a fresh boot). ok is false when the pool has none to give;
// the caller then boots its own.
func (p *pool) take(ctx context.Context, image string) (got pooled, ok bool) {
	p.mu.Lock()
	pi := p.images[image]
	if pi == nil || p.ctx.Err() != nil {
		p.mu.Unlock()
		return pooled{}, false
	}
	for len(pi.ready) > 0 {
		got = pi.ready[0]
		pi.ready = pi.ready[1:]
		if !machineDone(got.m) {
			pi.served++
			p.fillLocked(pi)
			p.mu.Unlock()
			return got, true
		}
		p.discard(got)
	}
	var pb *pendingBoot
	for _, b := range pi.booting {
		if !b.claimed {
			pb = b
			break
		}
	}
	if pb == nil {
		p.fillLocked(pi)
		p.mu.Unlock()
		return pooled{}, false
	}
	pb.claimed = true
	p.mu.Unlock()

	select {
	case <-pb.done:
	case <-ctx.Done():
		p.mu.Lock()
		select {
		case <-pb.done:
			// Booted meanwhile: it is this caller's; give it back unless its replacement is
			// already on its way.
			if pb.err == nil && len(pi.ready)+len(pi.booting) < pi.size {
				pi.ready = append(pi.ready, pb.got)
			} else if pb.err == nil {
				p.discard(pb.got)
			}
		default:
			pb.claimed = false
		}
		p.mu.Unlock()
		return pooled{}, false
	}
	if pb.err != nil {
		return pooled{}, false
	}
	p.mu.Lock()
	pi.served++
	p.mu.Unlock()
	return pb.got, true
}

// prune drops ready machines that have exited and boots their replacements.
func (p *pool) prune() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pi := range p.images {
		live := pi.ready[:0]
		for _, got := range pi.ready {
			if machineDone(got.m) {
				p.s.opt.Logf("warm pool (%s): a ready machine exited", pi.name)
				p.discard(got)
				continue
			}
			live = append(live, got)
		}
		pi.ready = live
		if pi.lastErr == "" {
			p.fillLocked(pi)
		}
	}
}

// status reports each image's pool.
func (p *pool) status() map[string]PoolStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]PoolStatus{}
	for name, pi := range p.images {
		out[name] = PoolStatus{Size: uint32(pi.size), Ready: len(pi.ready), Booting: len(pi.booting), Served: pi.served, Error: pi.lastErr}
	}
	return out
}

// stop cancels the boots in flight, stops every ready machine and waits for the boots to end.
func (p *pool) stop() {
	p.cancel()
	p.mu.Lock()
	for _, pi := range p.images {
		for _, got := range pi.ready {
			p.discard(got)
		}
		pi.ready = nil
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// poolable reports whether a create may take a pooled machine: the image's pool has the
// default cpus and memory and no network.
func poolable(st settings.Settings, cpus, mem uint32, network bool) bool {
	return cpus == st.DefaultCPUs && mem == st.DefaultMemoryMB && !network
}
