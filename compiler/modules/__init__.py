"""Modules: programs in more than one file (`import layers`, `import "path.kina" as name`).

Takes a file's path and import lines (and a `read(path) -> text | None`, so that open
editor buffers can stand in for the disk); gives, per import, the file it names and that
file's analysis (a Snapshot), each file analysed once and shared by all its importers, or
a diagnostic at the import (missing module, cycle).  compiler/analysis.py receives these
through its `loader` (snapshot.Loader) and is what makes each file's analysis
(Workspace(make_analysis=analysis.Analysis)); the program of a whole import closure is
assembled by Snapshot.program_for (compiler/check/linking.py).

Public modules and entry points (other packages import only these):
  workspace  Workspace(make_analysis, read=None, kina_path=None): analyse(path, text=None)
             -> Snapshot; loader (a snapshot.Loader); modules() (every file analysed, by
             path); importers_of(path) (the files to re-check when `path` changes); forget
  search     search_path(importer, kina_path): the importing file's folder, then $KINA_PATH,
             then the standard library (compiler/std/, core.stdlib.STD_DIR); resolve(decl, importer,
             kina_path, read) -> (path or None, the files tried)
  reverse    ImportedFunctions (reverseMode's checks of handles that reach imported functions,
             whose diagnostics are reported at the handle), Generic (functions by name where
             an instantiation `g$3` is `g`'s symbolic IR)

docs/language.md §4.2 ("Modules") is the user's view.  The language server keeps one
Workspace, whose `read` prefers its open buffers, analyses each open document with
`Analysis(path, loader=workspace.loader)` (or `workspace.analyse`), and re-analyses the
open `importers_of(path)` when a file changes.
"""
__all__ = ["reverse", "search", "workspace"]
