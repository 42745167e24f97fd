package images

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Tree is one install tree produced by a recipe: the directory Dir holds the
// files as they appear under the image prefix (Dir/bin/x becomes
// <Prefix>/bin/x). The metadata fields feed the labels and the SBOM.
type Tree struct {
	Name    string // recipe name, e.g. "protobuf"
	Version string // upstream version
	Hash    string // content hash of the recipe's plan node (recorded in labels)
	Dir     string // the install tree on disk

	SourceURL string // where the pinned source came from
	SHA256    string // hex sha256 of the pinned source archive
	License   string // SPDX license expression
	Homepage  string

	// Epoch is the time of the pinned source (e.g. its release date or the
	// mtime recorded in its archive); zero when unknown. DefaultEpoch uses it.
	Epoch time.Time
}

// DefaultEpoch derives a SOURCE_DATE_EPOCH from the trees: the latest of their
// pinned source times. It never looks at the clock, so the same pins always
// give the same epoch; when no tree carries a time it returns the Unix epoch.
func DefaultEpoch(trees []Tree) time.Time {
	latest := time.Unix(0, 0).UTC()
	for _, t := range trees {
		if t.Epoch.After(latest) {
			latest = t.Epoch
		}
	}
	return latest.UTC().Truncate(time.Second)
}

// ParseSourceDateEpoch parses a SOURCE_DATE_EPOCH value (decimal seconds since
// the Unix epoch, as in the reproducible-builds specification).
func ParseSourceDateEpoch(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want a non-negative integer of seconds", s)
	}
	return time.Unix(n, 0).UTC(), nil
}
