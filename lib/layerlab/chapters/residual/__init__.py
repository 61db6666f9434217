"""chapters/residual"""
