// Package recipe is tritonbuild's declarative input: the recipe schema (one
// YAML file per package: versions and their pinned sources, dependencies,
// options, build system) and the project's build.yaml (targets, pins,
// option values, externals, caches, profiles).
//
// Decoding is strict: unknown keys, wrong types and broken references are
// errors, each a *PosError with file:line:column and the field's YAML path;
// Load reports every problem of a recipe set at once as an ErrorList and
// checks what needs the whole set (dependencies, constraints, cycles).
// Nothing here runs a command or touches the network.
package recipe
