package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-go/iii/engine/protocol"
)

// BenchmarkCall times the cluster link alone (no engine, no worker: the serving engine answers
// at once) against a bare NATS request/reply with the same payload, at c = 1, 16 and 256.
func BenchmarkCall(b *testing.B) {
	url := natsURL(b)
	echo := func(_ context.Context, _ Key, r Request, _ time.Duration, answer func(json.RawMessage, *protocol.Error)) {
		answer(r.Data, nil)
	}
	a := join(b, url, "a", testKey, nil, echo)
	c := join(b, url, "c", testKey, nil, echo)
	k := Key{Namespace: "default", FunctionID: "remote::echo"}
	c.Sync([]Function{{Namespace: k.Namespace, FunctionID: k.FunctionID}})
	_ = c.nc.Flush()
	payload := json.RawMessage(`{"sandbox_id":"0d6f8c1e","cmd":"echo","args":["hello"]}`)
	rep, _ := nats.Connect(url)
	defer rep.Close()
	_, _ = rep.Subscribe("bench.echo", func(m *nats.Msg) { _ = m.Respond(m.Data) })
	_ = rep.Flush()
	req, _ := nats.Connect(url)
	defer req.Close()
	cluster := func() error {
		_, perr, found := a.Call(context.Background(), k, Request{Data: payload}, 10*time.Second)
		if perr != nil || !found {
			return perr
		}
		return nil
	}
	bare := func() error { _, err := req.Request("bench.echo", payload, 10*time.Second); return err }
	for _, conc := range []int{1, 16, 256} {
		for _, v := range []struct {
			name string
			call func() error
		}{{"cluster", cluster}, {"nats", bare}} {
			b.Run(fmt.Sprintf("c=%d/%s", conc, v.name), func(b *testing.B) {
				var wg sync.WaitGroup
				var next atomic.Int64
				start := time.Now()
				for range conc {
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							if err := v.call(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "calls/s")
			})
		}
	}
}
