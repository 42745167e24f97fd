// Package goals holds issue 18's limits that more than one benchmark
// prints, so that bench/python (which checks them in process) and
// bench/serving (which shows them beside its wrk figures) cannot drift
// apart.
package goals

import "time"

// PythonOverPytorch is the bound on the python backend's p50 over the
// pytorch backend's on the same model and load: 200 us with the report's
// tuned configuration (four instances), 400 us with fewer.
func PythonOverPytorch(instances int) time.Duration {
	if instances >= 4 {
		return 200 * time.Microsecond
	}
	return 400 * time.Microsecond
}
