//go:build race

package grpcapi

// raceEnabled: the race detector makes sync.Pool drop a share of what is
// put back, so allocation counts are not the program's.
const raceEnabled = true
