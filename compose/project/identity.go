package project

import (
	"sort"
	"strings"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
)

// checkIdentity looks at the engine's workers that belong to container key's processes while it
// starts. It fails WORKER_NAME_MISMATCH when the container registered, in the project's
// namespace, under a name other than its key (at once when that worker serves functions,
// otherwise once the startup timeout passed: final), and FUNCTIONS_IN_WRONG_NAMESPACE when it
// registered as key in the project's namespace but also serves functions in another one.
// Workers of VM containers run in the adapter, so only process containers are checked (Linux
// finds every process of a container; elsewhere only its first one).
func (p *Project) checkIdentity(f *composefile.File, key string, ws []liveWorker, final bool) error {
	if p.opts.Sup == nil || p.opts.Sup.Get(key) == nil || p.IsVM(key) {
		return nil
	}
	allowed := map[string]bool{f.Namespace: true}
	if IsAdapter(f.Containers[key]) && f.Engine != nil && f.Engine.Sandbox != nil {
		allowed[f.Engine.Sandbox.NamespaceFor(f.Namespace)] = true
	}
	ready := false
	var misnamed []liveWorker
	stray := map[string][]string{}
	for _, w := range ws {
		if !w.Registered {
			continue
		}
		if w.Name == key && w.Namespace == f.Namespace {
			ready = true
			continue
		}
		if !p.opts.Sup.Owns(key, w.PID) {
			continue
		}
		switch {
		case !allowed[w.Namespace] && len(w.Functions) > 0:
			stray[w.Namespace] = append(stray[w.Namespace], w.Functions...)
		case w.Namespace == f.Namespace && w.Name != key:
			misnamed = append(misnamed, w)
		}
	}
	if ready && len(stray) > 0 {
		var nss, parts []string
		for ns := range stray {
			nss = append(nss, ns)
		}
		sort.Strings(nss)
		for _, ns := range nss {
			fns := stray[ns]
			sort.Strings(fns)
			parts = append(parts, "'"+ns+"' ("+strings.Join(fns, ", ")+")")
		}
		return errcode.New(errcode.FunctionsInWrongNamespace, "container '%s' registered functions outside the project's namespace '%s': in %s. "+
			"A container's functions belong in its project's namespace: connect every worker of '%s' with III_NAMESPACE (do not name another namespace in its code or environment), or run that part as its own project",
			key, f.Namespace, strings.Join(parts, ", "), key)
	}
	if ready || len(misnamed) == 0 {
		return nil
	}
	w := misnamed[0]
	if !final && len(w.Functions) == 0 {
		return nil
	}
	return errcode.New(errcode.WorkerNameMismatch, "container '%s' registered in namespace '%s' as worker '%s', not as '%s'. "+
		"A container registers under its key: make the worker use III_WORKER_NAME as its name, or rename the container to '%s' in %s",
		key, f.Namespace, w.Name, key, w.Name, f.Path)
}
