// `import Trove` gives the engine too: the store is what the image cache (and, later, the
// memory tier and the HTTP pipeline) is built on. A tool that needs the store alone imports
// `TroveStore` and links no image library.
@_exported public import TroveStore
