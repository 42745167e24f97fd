package images_test

import (
	"context"
	"fmt"
	"log"

	"github.com/tritonbuild/tritonbuild/images"
)

// Assembling an image from the builder's install trees and writing it out.
func Example() {
	ctx := context.Background()
	trees := []images.Tree{
		{Name: "protobuf", Version: "3.21.12", Hash: "3f2a...", Dir: "/var/cache/tritonbuild/store/protobuf-3f2a",
			SourceURL: "https://example.org/protobuf-3.21.12.tar.gz", License: "BSD-3-Clause"},
		{Name: "tritonserver", Version: "0.1.0", Hash: "9c1e...", Dir: "/var/cache/tritonbuild/store/tritonserver-9c1e"},
	}
	asm, err := images.Assemble(ctx, images.Options{
		Trees:           trees,
		ModelRepository: "examples/models",
		Epoch:           images.DefaultEpoch(trees), // or ParseSourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH"))
		Version:         "0.1.0",
		CacheDir:        "/var/cache/tritonbuild/layers",
		Progress:        func(p images.Progress) { fmt.Printf("%s %s %d/%d\n", p.Stage, p.Name, p.Done, p.Total) },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer asm.Close()
	fmt.Print(asm.Summary)
	if err := images.WriteLayout(ctx, asm.Image, "out/oci", "0.1.0", images.OutputOptions{}); err != nil {
		log.Fatal(err)
	}
	if err := images.WriteTarball(ctx, asm.Image, "out/tritonserver.tar", "tritonserver:0.1.0", images.OutputOptions{}); err != nil {
		log.Fatal(err)
	}
	ref, err := images.Push(ctx, asm.Image, "localhost:5000/tritonserver:0.1.0", images.OutputOptions{Insecure: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pushed", ref)
}
