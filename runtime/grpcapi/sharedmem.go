package grpcapi

import (
	"context"

	"github.com/tritonbuild/tritonbuild/runtime/backend"
	pb "github.com/tritonbuild/tritonbuild/runtime/modelconfig"
	"github.com/tritonbuild/tritonbuild/runtime/sharedmem"
)

// SystemSharedMemoryStatus implements the RPC.
func (s *Server) SystemSharedMemoryStatus(_ context.Context, r *pb.SystemSharedMemoryStatusRequest) (*pb.SystemSharedMemoryStatusResponse, error) {
	st, err := s.opts.SharedMemory.Status(r.GetName())
	if err != nil {
		return nil, grpcError(err)
	}
	out := &pb.SystemSharedMemoryStatusResponse{Regions: make(map[string]*pb.SystemSharedMemoryStatusResponse_RegionStatus, len(st))}
	for _, reg := range st {
		out.Regions[reg.Name] = &pb.SystemSharedMemoryStatusResponse_RegionStatus{Name: reg.Name, Key: reg.Key, Offset: reg.Offset, ByteSize: reg.ByteSize}
	}
	return out, nil
}

// SystemSharedMemoryRegister implements the RPC.
func (s *Server) SystemSharedMemoryRegister(_ context.Context, r *pb.SystemSharedMemoryRegisterRequest) (*pb.SystemSharedMemoryRegisterResponse, error) {
	if err := s.opts.SharedMemory.Register(r.GetName(), r.GetKey(), r.GetOffset(), r.GetByteSize()); err != nil {
		return nil, grpcError(err)
	}
	return &pb.SystemSharedMemoryRegisterResponse{}, nil
}

// SystemSharedMemoryUnregister implements the RPC; an empty name
// unregisters every region.
func (s *Server) SystemSharedMemoryUnregister(_ context.Context, r *pb.SystemSharedMemoryUnregisterRequest) (*pb.SystemSharedMemoryUnregisterResponse, error) {
	if err := s.opts.SharedMemory.Unregister(r.GetName()); err != nil {
		return nil, grpcError(err)
	}
	return &pb.SystemSharedMemoryUnregisterResponse{}, nil
}

// CudaSharedMemoryStatus implements the RPC: this server holds no CUDA
// regions.
func (s *Server) CudaSharedMemoryStatus(_ context.Context, r *pb.CudaSharedMemoryStatusRequest) (*pb.CudaSharedMemoryStatusResponse, error) {
	if r.GetName() != "" {
		return nil, grpcError(backend.Errorf(backend.NotFound, "Unable to find cuda shared memory region: '%s'", r.GetName()))
	}
	return &pb.CudaSharedMemoryStatusResponse{}, nil
}

// CudaSharedMemoryRegister implements the RPC: refused, as by Triton
// built without GPUs.
func (s *Server) CudaSharedMemoryRegister(_ context.Context, r *pb.CudaSharedMemoryRegisterRequest) (*pb.CudaSharedMemoryRegisterResponse, error) {
	return nil, grpcError(sharedmem.CUDARegisterError(r.GetName()))
}

// CudaSharedMemoryUnregister implements the RPC: there is nothing to
// unregister.
func (s *Server) CudaSharedMemoryUnregister(context.Context, *pb.CudaSharedMemoryUnregisterRequest) (*pb.CudaSharedMemoryUnregisterResponse, error) {
	return &pb.CudaSharedMemoryUnregisterResponse{}, nil
}
