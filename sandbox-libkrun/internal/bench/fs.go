package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iii-go/iii/engine/core"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/sandbox-libkrun/image"
	"github.com/iii-go/iii/sandbox-libkrun/settings"
	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/qemu"
)

// fsFileSize is the file fs::write and fs::read move in the fs section.
const fsFileSize = 32 << 20

// fsTarget is the throughput the fs section compares with (MB/s, 10^6 bytes a second).
const fsTarget = 100.0

// measureFS writes a file of fsFileSize pseudo-random bytes into a python sandbox with fs::write
// (content: the read end of a stream channel the client writes), reads it back with fs::read
// (the client reads the returned channel), checks the sha256 of what came back, n times each,
// and prints the median throughput of each direction and the memory the process (engine,
// router, adapter and client in one) used meanwhile. First it times the driver leg alone
// (measureFSDriver) on a VM of the python image at rootfs.
func measureFS(ctx context.Context, d *qemu.Driver, n int, cache *image.Cache, rootfs string) error {
	wr, rd, err := measureFSDriver(ctx, d, rootfs, n)
	if err != nil {
		return err
	}
	fmt.Printf("%-44s write %s\n%-44s read  %s\n", "driver leg alone (vm.FSStreamer, 32 MiB):", rate(wr), "", rate(rd))

	st := settings.Defaults()
	st.AutoInstall = false
	st.ImageAllowlist = []string{"python"}
	s, err := startStack(ctx, d, st, cache)
	if err != nil {
		return err
	}
	defer s.close()
	id, stop, err := s.createPython(ctx, 2*time.Minute)
	if err != nil {
		return err
	}
	defer stop()

	runtime.GC()
	base := heapBytes()
	mem := startMemWatch(s.eng)
	wr, rd = nil, nil
	for i := 0; i < n; i++ {
		sum, mbs, err := fsWrite(ctx, s.client, id, uint64(i))
		if err != nil {
			_, _, _ = mem.stop()
			return err
		}
		wr = append(wr, mbs)
		mbs, err = fsRead(ctx, s.client, id, sum)
		if err != nil {
			_, _, _ = mem.stop()
			return err
		}
		rd = append(rd, mbs)
	}
	peakHeap, peakRSS, peakChan := mem.stop()
	fmt.Printf("fs::write / fs::read of a %d MiB file through stream channels (client -> engine -> router -> adapter -> guest),\n", fsFileSize>>20)
	fmt.Printf("sha256 checked, %d runs each; target %.0f MB/s; engine, adapter and client share this process\n", n, fsTarget)
	fmt.Printf("%-44s %s\n", "fs::write 32 MiB (channel content):", rate(wr))
	fmt.Printf("%-44s %s\n", "fs::read 32 MiB (channel content):", rate(rd))
	fmt.Printf("%-44s Go heap %.1f MiB before, peak %.1f MiB (+%.1f MiB); peak RSS %s\n", "memory while the files move:",
		mib(base), mib(peakHeap), mib(peakHeap-min(base, peakHeap)), peakRSS)
	fmt.Printf("%-44s peak %.1f MiB held in the engine's channel buffers\n", "", mib(peakChan))
	return nil
}

// fsWrite writes one file through a channel and returns its sha256 and the throughput.
func fsWrite(ctx context.Context, c *protocol.Worker, id string, seed uint64) ([]byte, float64, error) {
	rref, wref, err := c.CreateChannel(ctx)
	if err != nil {
		return nil, 0, err
	}
	h := sha256.New()
	t0 := time.Now()
	var wg sync.WaitGroup
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		w, err := c.OpenWriter(ctx, wref)
		if err != nil {
			werr = err
			return
		}
		src := io.TeeReader(io.LimitReader(rand.NewChaCha8(seedOf(seed)), fsFileSize), h)
		if _, err := io.CopyBuffer(w, src, make([]byte, protocol.ChannelChunk)); err != nil {
			werr = err
			return
		}
		werr = w.Close()
	}()
	raw, err := c.Call(ctx, "sandbox::fs::write", map[string]any{"sandbox_id": id, "path": "/tmp/bench.bin", "content": rref},
		protocol.WithTimeout(5*time.Minute))
	el := time.Since(t0)
	wg.Wait()
	if err != nil {
		return nil, 0, fmt.Errorf("fs::write: %w", err)
	}
	if werr != nil {
		return nil, 0, fmt.Errorf("fs::write channel: %w", werr)
	}
	var out struct {
		BytesWritten int `json:"bytes_written"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.BytesWritten != fsFileSize {
		return nil, 0, fmt.Errorf("fs::write: unexpected reply %s", raw)
	}
	return h.Sum(nil), float64(fsFileSize) / el.Seconds() / 1e6, nil
}

// fsRead reads the file back through the channel fs::read returns and checks its sha256.
func fsRead(ctx context.Context, c *protocol.Worker, id string, want []byte) (float64, error) {
	t0 := time.Now()
	raw, err := c.Call(ctx, "sandbox::fs::read", map[string]any{"sandbox_id": id, "path": "/tmp/bench.bin"}, protocol.WithTimeout(5*time.Minute))
	if err != nil {
		return 0, fmt.Errorf("fs::read: %w", err)
	}
	var out struct {
		Content protocol.ChannelRef `json:"content"`
		Size    int                 `json:"size"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Size != fsFileSize {
		return 0, fmt.Errorf("fs::read: unexpected reply %.200s", raw)
	}
	r, err := c.OpenReader(ctx, out.Content)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	h := sha256.New()
	k, err := io.CopyBuffer(h, r, make([]byte, protocol.ChannelChunk))
	el := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("fs::read channel: %w", err)
	}
	if k != fsFileSize || !bytes.Equal(h.Sum(nil), want) {
		return 0, fmt.Errorf("fs::read: %d bytes came back, sha256 differs from what was written", k)
	}
	return float64(fsFileSize) / el.Seconds() / 1e6, nil
}

func seedOf(n uint64) [32]byte {
	var s [32]byte
	copy(s[:], strconv.FormatUint(n, 10))
	return s
}

// rate prints the median and range of throughputs in MB/s against fsTarget.
func rate(v []float64) string {
	sort.Float64s(v)
	med := v[len(v)/2]
	mark := "meets the target"
	if med < fsTarget {
		mark = "MISSES the target"
	}
	return fmt.Sprintf("median %.1f MB/s (min %.1f, max %.1f): %s", med, v[0], v[len(v)-1], mark)
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

// heapBytes is the bytes of live and not yet swept heap objects.
func heapBytes() uint64 {
	metrics.Read(heapSample)
	return heapSample[0].Value.Uint64()
}

// memWatch samples the heap and the bytes the engine's stream channels buffer every few
// milliseconds and keeps their peaks; the peak RSS is the kernel's high-water mark, reset when
// the watch starts.
type memWatch struct {
	done chan struct{}
	peak chan [2]uint64
}

func startMemWatch(eng *core.Engine) *memWatch {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM (Linux)
	m := &memWatch{done: make(chan struct{}), peak: make(chan [2]uint64, 1)}
	go func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		var heap, chans uint64
		for {
			heap = max(heap, heapBytes())
			chans = max(chans, uint64(eng.ChannelBytes()))
			select {
			case <-m.done:
				m.peak <- [2]uint64{heap, chans}
				return
			case <-t.C:
			}
		}
	}()
	return m
}

// stop ends the watch and returns the peak heap, the peak RSS as text and the peak of the
// engine's channel buffers.
func (m *memWatch) stop() (uint64, string, uint64) {
	close(m.done)
	peak := <-m.peak
	rss := "unknown"
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				rss = strings.TrimSpace(v)
			}
		}
	}
	return peak[0], rss, peak[1]
}

// measureFSDriver times the VM leg alone: FSWrite and FSRead of fsFileSize bytes on a booted
// machine, without engine, channels or adapter.
func measureFSDriver(ctx context.Context, d *qemu.Driver, rootfs string, n int) (wr, rd []float64, err error) {
	state, err := os.MkdirTemp("", "iii-bench-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(state)
	m, err := d.Boot(ctx, vm.Spec{RootFS: rootfs, CPUs: 1, MemoryMB: sandboxMemoryMB, StateDir: state})
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = m.Stop(ctx); <-m.Done() }()
	st, ok := m.(vm.FSStreamer)
	if !ok {
		return nil, nil, fmt.Errorf("the driver's machine does not stream files")
	}
	req := json.RawMessage(`{"path":"/tmp/driver.bin"}`)
	for i := 0; i < n; i++ {
		h := sha256.New()
		t0 := time.Now()
		if _, err := st.FSWrite(ctx, req, io.TeeReader(io.LimitReader(rand.NewChaCha8(seedOf(uint64(i))), fsFileSize), h)); err != nil {
			return nil, nil, fmt.Errorf("FSWrite: %w", err)
		}
		wr = append(wr, float64(fsFileSize)/time.Since(t0).Seconds()/1e6)
		t0 = time.Now()
		_, body, err := st.FSRead(ctx, req)
		if err != nil {
			return nil, nil, fmt.Errorf("FSRead: %w", err)
		}
		h2 := sha256.New()
		k, err := io.Copy(h2, body)
		body.Close()
		if err != nil || k != fsFileSize || !bytes.Equal(h.Sum(nil), h2.Sum(nil)) {
			return nil, nil, fmt.Errorf("FSRead: %d bytes, %w, or a different sha256", k, err)
		}
		rd = append(rd, float64(fsFileSize)/time.Since(t0).Seconds()/1e6)
	}
	return wr, rd, nil
}
