package project

import (
	"context"
	"slices"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
)

// Reloader re-reads the compose file and installs its packages (compose::restart without a
// worker, req C7).
type Reloader func(ctx context.Context) (*composefile.File, map[string]Package, error)

// RestartResult is the reply of compose::restart.
type RestartResult struct {
	Status    string   `json:"status"`
	Container string   `json:"container,omitempty"`
	Changed   bool     `json:"changed"`
	Restarted []string `json:"restarted"`
	Down      *Result  `json:"down,omitempty"`
	Up        *Result  `json:"up,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
}

// Restart restarts the project. Without a container it re-reads the file through reload, stops
// everything, and starts the project the edited file describes. With the adapter's key it
// restarts the adapter (which reads its host roots again) and each VM worker it was running.
// With another key it restarts that container and its dependents.
func (p *Project) Restart(ctx context.Context, container string, reload Reloader) (RestartResult, error) {
	if container == "" {
		f, pkgs, err := reload(ctx)
		if err != nil {
			return RestartResult{}, err
		}
		old := p.File()
		var removedVMs []string
		for _, k := range old.Order {
			if f.Containers[k] == nil && p.IsVM(k) {
				removedVMs = append(removedVMs, k)
			}
		}
		// VM workers that left the file lose their state; the others keep it across the restart.
		warnings := p.cleanupVMs(ctx, old, removedVMs)
		down, err := p.down(ctx, "")
		if err != nil {
			return RestartResult{}, err
		}
		p.SetFile(f, pkgs)
		up, err := p.Up(ctx, "")
		res := RestartResult{Status: up.Status, Changed: true, Down: &down, Up: &up, Warnings: warnings}
		for _, o := range up.Containers {
			res.Restarted = append(res.Restarted, o.Container)
		}
		return res, err
	}
	if err := p.unknown(container); err != nil {
		return RestartResult{}, err
	}
	f := p.File()
	keys := []string{container}
	if container == AdapterKey(f) {
		for _, k := range f.StartOrder() {
			if k != container && p.IsVM(k) && p.running(k) {
				keys = append(keys, k)
			}
		}
	}
	for _, d := range Dependents(f, container) {
		if p.running(d) && !slices.Contains(keys, d) {
			keys = append(keys, d)
		}
	}
	for i := len(keys) - 1; i >= 0; i-- {
		p.stop(ctx, f, keys[i])
	}
	res := RestartResult{Status: "ok", Container: container, Changed: true}
	for _, k := range p.startOrder(f, orderOf(f, keys)) {
		if err := p.start(ctx, f, k); err != nil {
			res.Status = "failed"
			e := errcode.As(err, errcode.EngineCallFailed)
			return res, e
		}
		res.Restarted = append(res.Restarted, k)
	}
	return res, nil
}

// orderOf returns keys in the file's start order.
func orderOf(f *composefile.File, keys []string) []string {
	var out []string
	for _, k := range f.StartOrder() {
		if slices.Contains(keys, k) {
			out = append(out, k)
		}
	}
	return out
}
