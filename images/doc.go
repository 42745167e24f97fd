// Package images assembles OCI images from install trees without a container
// daemon, using go-containerregistry.
//
// It owns every byte that goes into an image: one deterministic gzip layer per
// install tree (all merged under one prefix, so rebuilding one recipe changes
// one layer), a distroless-style base layer holding exactly the shared
// libraries the installed ELF files need (or a caller-chosen base image), an
// SPDX 2.3 SBOM layer, an optional model-repository layer, the image config
// and labels, and the outputs: an OCI image layout, a docker-loadable tarball
// or a registry push.
//
// Reproducibility is the central invariant: the same trees, options and
// SOURCE_DATE_EPOCH give the same manifest digest on any machine with the same
// host libraries. Layer tars are written by this package (sorted entries, fixed
// owners and times, no variable header fields) and compressed with a fixed
// gzip header, never through mutate.Time, which would hold whole layers in
// memory.
package images
