"""chapters/anatomy"""
