// Package observe is iii 0.26's observe model as this engine serves it: an observer watches a
// function (its source) and, after each call of it that the engine routes and that its `on`,
// filters and rights allow, runs another function (its target) with what the call was. The
// target gets the Observed envelope by default:
//
//	{observer_id, function_id, namespace, input, output, caller, metadata?, observer_metadata?}
//
// with only the parts its capture names (default input, output and caller), or only the input
// or only the output with deliver "input" or "output".
//
// The engine (package core) keeps one Registry, serves engine::observers::add, ::remove and
// ::list, and calls Match as a routed call ends. Filters are the declarative documents of
// ParseFilter, read over the roots input, output, error, caller and metadata. A void call has no
// outcome the engine sees, so it fires no observer.
//
// Every observer of a call copies the call into its target's payload, so a Registry is bounded
// (Limits): observers per owner and in all, and the payload bytes of the deliveries in flight
// per owner and in all (a fire past them is dropped and counted). The parts of a call's payloads
// are encoded once and shared by its deliveries; each target call has a timeout.
package observe
