"""chapters/growth"""
