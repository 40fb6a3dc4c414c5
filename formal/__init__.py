"""Formal proofs of the controller and its blocks (docs/verification.md, "Formal proofs").

Each proof is a specification that wraps a block, drives its inputs with arbitrary values
(``AnySeq``, ``AnyConst``) under the input rules the block is promised, and asserts what the
block promises in return, with covers that show each scenario is reachable. SymbiYosys proves
them: to a depth (bounded model checking) or for every depth (k-induction).
"""
