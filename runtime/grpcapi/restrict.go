package grpcapi

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tritonbuild/tritonbuild/runtime/access"
)

// restrictedPrefix leads the metadata key a restricted protocol requires,
// as with Triton.
const restrictedPrefix = "triton-grpc-protocol-"

// methodCategory is the API group of a full method name, as
// --grpc-restricted-protocol names them.
func methodCategory(full string) access.Category {
	if strings.HasPrefix(full, "/grpc.health.v1.Health/") {
		return access.Health
	}
	switch full[strings.LastIndexByte(full, '/')+1:] {
	case "ServerLive", "ServerReady", "ModelReady":
		return access.Health
	case "ServerMetadata", "ModelMetadata":
		return access.Metadata
	case "ModelInfer", "ModelStreamInfer":
		return access.Inference
	case "ModelConfig":
		return access.ModelConfig
	case "ModelStatistics":
		return access.Statistics
	case "RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload":
		return access.ModelRepository
	case "SystemSharedMemoryStatus", "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister",
		"CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister":
		return access.SharedMemory
	case "TraceSetting":
		return access.Trace
	case "LogSettings":
		return access.Logging
	}
	return ""
}

func (s *Server) allowed(ctx context.Context, method string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	return grpcError(s.opts.Restricted.Check(methodCategory(method), "protocol", restrictedPrefix, md.Get))
}

func (s *Server) restrictUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := s.allowed(ctx, info.FullMethod); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (s *Server) restrictStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := s.allowed(ss.Context(), info.FullMethod); err != nil {
		return err
	}
	return handler(srv, ss)
}
