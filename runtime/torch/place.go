package torch

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
)

// PlacesInstances reports that a pytorch model may run under a host policy
// (--host-policy=<policy>,cpu-cores=<list>, numa-node=<node>): each
// instance whose group is under one loads its module and runs its forwards
// on an OS thread of its own, confined to the policy's CPUs and its memory
// bound to the policy's NUMA node, as Triton creates and runs an instance
// on a thread under its policy.
func (b *Backend) PlacesInstances() bool { return true }

// placedForwarder runs every forward of fwd on one OS thread under a host
// policy. Triton sets the policy on the thread that runs an instance, and
// the threads that thread starts inherit it: here that is libtorch's
// intra-op (OpenMP) team, which a thread creates at its first parallel
// forward and which takes the creator's affinity and memory policy, and the
// per-thread intra-op count tbtorch sets before each forward. A goroutine
// moves between OS threads, so the forward cannot run on the caller's.
type placedForwarder struct {
	fwd  forwarder
	work chan placedCall
	done chan placedResult // one call at a time: Execute is never concurrent on an instance
}

type placedCall struct{ inputs []backend.Tensor }

type placedResult struct {
	outputs []backend.Tensor
	err     error
}

// placeForwards starts the confined thread and runs open on it, once the
// policy applies, for the forwarder: what open allocates (a module's
// weights) comes from the policy's NUMA node, as under Triton, which
// creates an instance on a thread under its policy. It fails when the
// kernel refuses the CPUs (none of them exists or is in the server's
// cpuset) or the NUMA node (it has no memory, or the cpuset excludes it),
// and with open's error as is when open fails; the thread then ends. stop
// ends it otherwise.
func placeForwards(policy backend.HostPolicy, open func() (forwarder, error)) (*placedForwarder, error) {
	p := &placedForwarder{work: make(chan placedCall), done: make(chan placedResult, 1)}
	started := make(chan error, 1)
	go p.loop(policy, open, started)
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func (p *placedForwarder) loop(policy backend.HostPolicy, open func() (forwarder, error), started chan<- error) {
	// Never unlocked: when this goroutine returns, its thread ends with it
	// instead of going back to the runtime with the policy's affinity.
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The process's main thread, which the runtime parks for good
		// instead of ending it. Start over on a goroutine that cannot be
		// scheduled here while this one holds the thread.
		moved := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(moved)
			p.confine(policy, open, started)
		}()
		<-moved
		runtime.UnlockOSThread()
		return
	}
	p.confine(policy, open, started)
}

// confine applies the policy to the locked thread, opens the forwarder on
// it and runs forwards on it until stop.
func (p *placedForwarder) confine(policy backend.HostPolicy, open func() (forwarder, error), started chan<- error) {
	if len(policy.CPUs) > 0 {
		var set unix.CPUSet
		for _, c := range policy.CPUs {
			set.Set(c)
		}
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			started <- fmt.Errorf("cannot confine the instance's thread to CPUs %s (its host policy's cpu-cores): %w", backend.FormatCPUList(policy.CPUs), err)
			return
		}
	}
	if len(policy.NUMANodes) > 0 {
		if err := backend.BindMemory(policy.NUMANodes); err != nil {
			started <- fmt.Errorf("the instance's thread (its host policy's numa-node): %w", err)
			return
		}
	}
	fwd, err := open()
	if err != nil {
		started <- err
		return
	}
	p.fwd = fwd // before started: placeForwards' caller sees it set
	started <- nil
	for c := range p.work {
		out, err := p.fwd.Forward(c.inputs)
		p.done <- placedResult{out, err}
	}
}

// Forward hands inputs to the confined thread and waits for its result.
func (p *placedForwarder) Forward(inputs []backend.Tensor) ([]backend.Tensor, error) {
	p.work <- placedCall{inputs}
	r := <-p.done
	return r.outputs, r.err
}

// stop ends the thread once its current forward, if any, returns. No
// Forward may follow.
func (p *placedForwarder) stop() { close(p.work) }
